"""The shipped agent on a real GPU, its node frames kept in its spool (Kafka unreachable), then decoded.

Run on the GPU machine from the repository root (the package's dependencies importable,
PyTorch present for the load)::

    OUT=/tmp/out python3 benchmarks/gpu/node_frames_spool.py

Why the spool: it holds exactly the messages the agent would have produced (key, headers and
frame), so a machine without a Kafka broker still shows what the agent sends. The agent runs
with its defaults (node frames, window 10, 1-s maximum delay) and a broker address nothing
listens on, while a load runs on the GPU: idle, then matrix products, then products with
pauses (a bursty job), then idle. After SIGTERM (the agent flushes what is pending into the
spool) every spooled message is read back and decoded with the collector's node frame
decoder, and checked: every frame decodes, in sequence, each GPU's records in time order.
Writes ``$OUT/spool/`` (the agent's own files), ``$OUT/agent.log`` and ``$OUT/check.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.torch_load import PRELUDE  # noqa: E402
from tests.support.spool_frames import check  # noqa: E402

LOAD = PRELUDE + "time.sleep(15); run(30, 0.95); run(20, 0.3); time.sleep(15)\n"


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GPUWATCH_ATTRIBUTION": "false", "GPUWATCH_PROBE_SOCKET": ""}
    with open(out / "agent.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent", "--node-name", "gpu-node", "--kafka-bootstrap", "127.0.0.1:9",
             "--spool-dir", str(out / "spool"), "--metrics-port", "0", "--metrics-host", "127.0.0.1"],
            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=ROOT)
        time.sleep(5)
        load = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=240)
        time.sleep(3)
        agent.send_signal(signal.SIGTERM)
        rc = agent.wait(timeout=60)
    result = {"agent_rc": rc, "load_rc": load.returncode, "load_stderr": load.stderr[-500:], **check(out / "spool")}
    (out / "check.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
