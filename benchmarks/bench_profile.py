"""The agent's CPU during a CPU-profile capture, against the same agent without one, in one run.

Runs the real agent (simulated GPUs, its sampling threads and framer) for ``--seconds``
twice, back to back in one process: once idle (baseline), once while its profiler takes one
py-spy capture (``--duration`` s at ``--rate`` Hz) of a real busy Python child. The agent's
CPU is the sum of its :mod:`agent.cpuclock` accounts, and during the capture the ``profile``
account holds the profiler thread and py-spy's own CPU (from the child's resource usage).
Reports both windows, their ratio, one capture's cost, and that cost spread over the
default rate limit (one capture per process per 10 minutes).

    python benchmarks/bench_profile.py --simulate 8 --seconds 8
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.cpuclock import ThreadCpu
from agent.driver.simulated import SimulatedFleet
from agent.framing import Framer
from agent.profiling import PROFILE, ProfileConfig, Profiler
from agent.pyspy import PySpyRunner, find_py_spy
from agent.runtime import Agent, ScheduleConfig
from telemetry.control import ProfileRequest
from telemetry.profile import ProfileResult
from telemetry.records import GpuRecord, ProcessRecord
from telemetry.wire import Message

BUSY = "def gpuwatch_busy():\n    x = 0\n    while True:\n        x += 1\nprint('ready', flush=True)\ngpuwatch_busy()\n"


def window(cpu: ThreadCpu, seconds: float, during: object = None) -> dict[str, float]:
    before = cpu.accounts()
    start = time.monotonic()
    if callable(during):
        during()
    time.sleep(max(0.0, seconds - (time.monotonic() - start)))
    after = cpu.accounts()
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--simulate", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8.0, help="each window (longer than --duration)")
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rate", type=int, default=100)
    args = p.parse_args()
    binary = find_py_spy()
    if binary is None:
        print("py-spy is not installed (pip install 'gpuwatch[profile]')", file=sys.stderr)
        return 1
    cpu = ThreadCpu()
    answers: list[Message] = []
    framer = Framer(lambda _m: None, node="bench", instance="bench", cpu=cpu)
    profiler = Profiler(ProfileConfig(enabled=True, duration_s=args.duration, rate_hz=args.rate), "bench", "bench",
                        answers.append, runner=PySpyRunner(binary), cpu=cpu)
    agent = Agent(SimulatedFleet(args.simulate, seed=7), "bench", ScheduleConfig(floor=0.25, busy=1.0), cpu=cpu,
                  calibrate_calls=False, record_sinks=(framer.add,))
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        agent.start()
        framer.start()
        profiler.start()
        window(cpu, 2.0)  # warm-up: first samples, GPM's first pair
        gpu = next(iter(agent.targets))
        profiler.observe(GpuRecord(time.time(), "bench", gpu, {}, processes=[ProcessRecord(pid=child.pid)]))
        base = window(cpu, args.seconds)
        request = ProfileRequest("bench", gpu, 1, time.time())
        during = window(cpu, args.seconds, lambda: profiler.request(request))
    finally:
        profiler.stop(args.duration + 15)
        framer.stop()
        agent.stop()
        child.kill()
        child.wait(10)
    result = ProfileResult.decode(answers[0].value) if answers else None
    status = result.processes[0].status if result and result.processes else "none"
    base_total, during_total = sum(base.values()), sum(during.values())
    capture = during.get(PROFILE, 0.0)
    out = {
        "machine": f"{platform.machine()}, {platform.node()}, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"), "simulated_gpus": args.simulate, "window_s": args.seconds,
        "capture": f"{args.duration:g} s at {args.rate} Hz", "status": status,
        "samples": result.processes[0].samples if result and result.processes else 0,
        "baseline_cpu_s": round(base_total, 4), "during_cpu_s": round(during_total, 4),
        "ratio": round(during_total / base_total, 2) if base_total else None,
        "capture_cpu_s": round(capture, 4),
        "baseline_core_pct": round(100 * base_total / args.seconds, 3),
        "during_core_pct": round(100 * during_total / args.seconds, 3),
        "capture_over_600s_core_pct": round(100 * capture / 600, 4),
        "accounts_during": {k: round(v, 4) for k, v in during.items()},
    }
    print(json.dumps(out, indent=2))
    return 0 if status == "captured" else 1


if __name__ == "__main__":
    raise SystemExit(main())
