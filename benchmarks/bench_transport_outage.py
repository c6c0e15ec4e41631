"""The agent's transport CPU while connected and while the broker is away (issue 10, item 9).

Why: the transport has its own CPU budget (1% of a core); during an outage its clients keep
retrying, and the retries must not cost more than the sending did. Runs a real ``gpuwatch
agent --simulate 4`` (0.5 s sampling) against a real tansu broker, reads the agent's own
``gpuwatch_agent_cpu_seconds_total{account=...}`` over 20 s connected, kills the broker, and
reads it again over 20 s. ``--tree`` runs the agent of another checkout too (a baseline in the
same run: ``git archive REV | tar -x -C DIR``).

    python benchmarks/bench_transport_outage.py [--tree /tmp/base] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures_kafka import KafkaBroker, create_topic, find_tansu  # noqa: E402
from tests.ports import free_port  # noqa: E402

WINDOW_S = 20.0


def _cpu(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    pattern = r'gpuwatch_agent_cpu_seconds_total\{account="(\w+)"\} ([0-9.e+-]+)'
    return {k: float(v) for k, v in re.findall(pattern, text)}


def _rate(port: int) -> dict[str, float]:
    c0 = _cpu(port)
    time.sleep(WINDOW_S)
    c1 = _cpu(port)
    return {k: round((c1[k] - c0.get(k, 0.0)) / WINDOW_S * 100, 3) for k in c1}


def run(tree: Path) -> dict[str, Any]:
    tansu = find_tansu()
    assert tansu is not None, "tansu not installed (pip install -e '.[dev]')"
    with tempfile.TemporaryDirectory(prefix="gpuwatch-outage-") as tmp:
        work = Path(tmp)
        broker = KafkaBroker(tansu, free_port(), work, "memory://tansu/", {})
        broker.start()
        for topic, parts in (("gpu.telemetry", 3), ("gpu.telemetry.control", 1)):
            create_topic(broker.bootstrap, topic, partitions=parts)
        port = free_port()
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent", "--simulate", "4", "--node-name", "n0", "--kafka-bootstrap",
             broker.bootstrap, "--spool-dir", str(work / "spool"), "--metrics-port", str(port), "--metrics-host",
             "127.0.0.1", "--interval-floor", "0.5", "--interval-ceiling", "0.5", "--busy-interval", "0.5",
             "--log-level", "ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
        try:
            time.sleep(12)  # start-up and the first connections are not the steady state
            connected = _rate(port)
            broker.kill()
            time.sleep(12)  # the outage noticed (request timeout 10 s)
            down = _rate(port)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(60)
            broker.stop()
    return {"tree": str(tree), "connected_pct_of_core": connected, "broker_down_pct_of_core": down}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to run too")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = [run(t) for t in [ROOT, *args.tree]]
    for r in rows:
        print(json.dumps(r))
    if args.json:
        args.json.write_text(json.dumps({"window_s": WINDOW_S, "date": time.strftime("%Y-%m-%d %H:%M"),
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
