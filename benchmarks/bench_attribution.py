"""Cost of the agent's pid -> identity lookup on its hot path, against re-reading /proc.

Every sample of every GPU asks the attributor who each GPU process is. Within the
revalidation window (2 s) a known pid must cost dict lookups only; this measures that
per call, over a fake /proc tree of 24 processes (the format the kernel writes), and, in
the same run, the same calls with revalidation on every call (``revalidate_s=0``: one
read of /proc/PID/stat each), which is the baseline of the ratio. (It was a unit test's
"under 40 µs a call" assertion; timing belongs here, not in the tests.)

    python benchmarks/bench_attribution.py [--calls 24000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.attribution import Attributor
from tests.support.procfs import write_proc

NODE = "gpu-node-a"

PIDS = list(range(100, 124))


def per_call_us(attributor: Attributor, calls: int) -> float:
    for pid in PIDS:  # warm: every pid known
        attributor.identify(pid)
    rounds = max(1, calls // len(PIDS))
    started = time.perf_counter()
    for _ in range(rounds):
        for pid in PIDS:
            attributor.identify(pid)
    return (time.perf_counter() - started) / (rounds * len(PIDS)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=24_000)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each; the median is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for pid in PIDS:
            write_proc(root, pid)
        cached = [per_call_us(Attributor(NODE, proc_root=root), args.calls) for _ in range(args.repeat)]
        reread = [per_call_us(Attributor(NODE, proc_root=root, revalidate_s=0.0), args.calls)
                  for _ in range(args.repeat)]
    result = {
        "cached_us_per_call": round(statistics.median(cached), 3),
        "reread_stat_us_per_call": round(statistics.median(reread), 3),
        "ratio_cached_to_reread": round(statistics.median(cached) / statistics.median(reread), 4),
        "calls": args.calls, "repeat": args.repeat,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "date": datetime.now(UTC).strftime("%Y-%m-%d")},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
