"""What every benchmark result ends with: the machine, the date, the commit; printed and kept as JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def finish(result: dict[str, Any], json_path: str | None) -> None:
    """Stamp ``result`` with where and when it was measured, print it, and write it to ``json_path``."""
    result["machine"] = (f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}")
    result["date"] = time.strftime("%Y-%m-%d")
    result["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                      capture_output=True, text=True, check=False).stdout.strip()
    text = json.dumps(result, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
