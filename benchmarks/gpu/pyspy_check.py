"""Whether the agent's py-spy capture works on the GPU machine, against a real PyTorch job.

Why: the CPU profile of a throughput drop (issue 14) must attach to a CUDA process, whose
native threads have no Python frames. Starts a small bf16 training loop, captures it for 5 s
with the agent's own runner (agent/pyspy.py, as the profiler does), and writes the result.

    OUT=/tmp/out PATH=/tmp/site/bin:$PATH python3 benchmarks/gpu/pyspy_check.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.pyspy import PySpyRunner, find_py_spy  # noqa: E402
from telemetry.profile import parse_folded  # noqa: E402, F401  (the parser the capture used)

JOB = """
import time, torch
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
def prepare():
    h = torch.randn(512, 512)
    for _ in range(20):
        h = torch.tanh(h @ h)
    return h
end = time.time() + 40
while time.time() < end:
    prepare()
    for _ in range(8):
        y = x @ x
    torch.cuda.synchronize()
"""


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/gpuwatch-pyspy"))
    out.mkdir(parents=True, exist_ok=True)
    job = subprocess.Popen([sys.executable, "-c", JOB])
    try:
        time.sleep(15)
        binary = find_py_spy()
        capture = PySpyRunner(binary)(job.pid, 5.0, 100, 30.0)
    finally:
        job.kill()
        job.wait(30)
    top = sorted(capture.stacks, key=lambda s: -s[1])[:8]
    result = {"binary": binary, "status": capture.status, "reason": capture.reason,
              "cpu_seconds": capture.cpu_seconds, "stacks": len(capture.stacks),
              "samples": sum(n for _, n in capture.stacks),
              "top": [{"count": n, "frames": stack.split(";")[-5:]} for stack, n in top]}
    (out / "pyspy-check.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0 if capture.status == "captured" else 1


if __name__ == "__main__":
    sys.exit(main())
