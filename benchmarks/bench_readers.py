"""Sampling cost: CPU microseconds per GPU-sample of the agent's sampler on the simulated driver.

Run from the repository root::

    .venv/bin/python benchmarks/bench_readers.py --baseline main --json out.json

Why: the sampler turns each driver call into DCGM-unit metrics (``agent/readers.py``,
``agent/gpm.py``) on every sample of every GPU, the agent's hot path under its 1% CPU
budget. This times ``Sampler.sample`` (all readers, GPM, the process list) over the
simulated H200 fleet, with the simulated driver's own cost included and equal on both
sides. With ``--baseline REV`` the same loop runs in that commit's code (``git archive``
into a temporary directory, a subprocess on the same CPU), alternating with this tree's
runs; the best of ``--repeat`` runs on each side gives the ratio (noise only adds time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_LOOP = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from agent.devices import discover
from agent.driver.simulated import SimulatedFleet
from agent.sampler import Sampler
gpus, rounds = int(sys.argv[2]), int(sys.argv[3])
now = [1000.0]
fleet = SimulatedFleet(gpus, clock=lambda: now[0], start=0.0)
fleet.init()
sampler = Sampler(fleet, "node", "v")
targets = discover(fleet)
for t in targets:
    sampler.sample(t, now[0])
began = time.process_time()
for _ in range(rounds):
    now[0] += 1.0
    for t in targets:
        sampler.sample(t, now[0])
print(json.dumps({"cpu_us_per_sample": (time.process_time() - began) / (rounds * len(targets)) * 1e6}))
"""


def _run(tree: str, gpus: int, rounds: int) -> float:
    done = subprocess.run([sys.executable, "-c", _LOOP, tree, str(gpus), str(rounds)], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": tree})
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_us_per_sample"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--baseline", metavar="REV", help="also time the same loop on this commit (ratio in the result)")
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    root = Path(__file__).resolve().parent.parent
    base_dir = None
    if args.baseline:
        base_dir = tempfile.mkdtemp(prefix="bench-readers-")
        archive = subprocess.run(["git", "-C", str(root), "archive", args.baseline], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", base_dir], input=archive.stdout, check=True)
    try:
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.repeat):
            ours.append(_run(str(root), args.gpus, args.rounds))
            if base_dir is not None:
                theirs.append(_run(base_dir, args.gpus, args.rounds))
    finally:
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
    result: dict[str, object] = {"gpus": args.gpus, "rounds": args.rounds, "repeat": args.repeat,
                                 "cpu_us_per_sample": round(min(ours), 2),
                                 "load_avg_1m": os.getloadavg()[0], "python": sys.version.split()[0]}
    if theirs:
        result |= {"baseline": args.baseline, "baseline_cpu_us_per_sample": round(min(theirs), 2),
                   "ratio": round(min(ours) / min(theirs), 3)}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
