"""Replay speed: records per second through ``gpuwatch replay``'s path on one core.

Run from the repository root::

    .venv/bin/python benchmarks/bench_replay.py                  # writes a 32-GPU x 1 h trace to a temp file
    .venv/bin/python benchmarks/bench_replay.py --trace t.jsonl  # or times an existing trace
    .venv/bin/python benchmarks/bench_replay.py --baseline HEAD~1  # and the same trace on another commit

With ``--baseline REV`` the same trace is also replayed by that commit's code (``git
archive`` into a temporary directory, run in a subprocess), alternating with this tree's
runs, and the result gives the ratio: the comparison the figures need, made in one run
on the same machine and load.

It times what the command does, end to end: reading the JSON Lines file, parsing and
validating each record (telemetry.records), and every detector (collector.detect), the
best of ``--repeat`` runs (a shared machine's noise only ever adds time), as wall-clock
records/s and as records per second of this process's own CPU time (what one core
does when other work shares the machine; the load average is recorded). The trace comes
from the incident generator (tests/support/incidents), so the detectors have real work:
baselines, peers, incidents opening and closing. Pinned to one CPU where the OS allows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.detect.replay import read_trace, replay
from telemetry.records import GpuRecord
from tests.support.incidents.generate import Fleet

_BASELINE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from collector.detect.replay import read_trace, replay
began, cpu = time.perf_counter(), time.process_time()
result = replay(read_trace(sys.argv[2]))
print(json.dumps({"s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu,
                  "anomalies": len(result.anomalies)}))
"""


def _time_baseline(base_dir: str, trace: str) -> dict[str, float]:
    """One replay of ``trace`` by the code in ``base_dir``, in a subprocess on the same CPU."""
    done = subprocess.run([sys.executable, "-c", _BASELINE, base_dir, trace], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [base_dir, *filter(None, [os.environ.get("PYTHONPATH")])])})
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trace", help="an existing JSON Lines trace (default: generate one)")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="write the result here")
    p.add_argument("--baseline", metavar="REV", help="also time the same trace on this commit (ratio in the result)")
    p.add_argument("--baseline-dir", metavar="DIR",
                   help="the same with that commit's tree already unpacked here (a machine with no git history: "
                        "git archive REV | tar -x -C DIR beforehand)")
    args = p.parse_args()
    if args.baseline and args.baseline_dir:
        p.error("--baseline and --baseline-dir: one of them")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    path = args.trace
    tmp = None
    if path is None:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8")  # noqa: SIM115
        for rec in Fleet(nodes=args.nodes, hours=args.hours, seed=1).records():
            if isinstance(rec, GpuRecord):  # the replay format has no events
                tmp.write(rec.to_json() + "\n")
        tmp.close()
        path = tmp.name
    size = os.path.getsize(path)
    base_dir = tempfile.mkdtemp(prefix="gpuwatch-baseline-") if args.baseline else args.baseline_dir
    if args.baseline:
        root = Path(__file__).resolve().parent.parent
        archive = subprocess.run(["git", "-C", str(root), "archive", args.baseline], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", base_dir], input=archive.stdout, check=True)
    best = best_cpu = base_best = base_cpu = float("inf")
    records = anomalies = base_anomalies = 0
    try:
        for _ in range(args.repeat):
            began, began_cpu = time.perf_counter(), time.process_time()
            result = replay(read_trace(path))
            best = min(best, time.perf_counter() - began)
            best_cpu = min(best_cpu, time.process_time() - began_cpu)
            records, anomalies = result.records, len(result.anomalies)
            if base_dir is not None:
                b = _time_baseline(base_dir, path)
                base_best, base_cpu = min(base_best, b["s"]), min(base_cpu, b["cpu_s"])
                base_anomalies = b["anomalies"]
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
        if args.baseline and base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
    out = {"records": records, "bytes": size, "anomalies": anomalies, "best_s": round(best, 3),
           "records_per_s": round(records / best), "cpu_s": round(best_cpu, 3),
           "records_per_cpu_s": round(records / best_cpu), "load_avg_1m": os.getloadavg()[0],
           "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    if base_dir is not None:
        out.update({"baseline": args.baseline or args.baseline_dir,
                    "baseline_records_per_s": round(records / base_best),
                    "baseline_records_per_cpu_s": round(records / base_cpu), "baseline_anomalies": base_anomalies,
                    "ratio_wall": round(base_best / best, 3), "ratio_cpu": round(base_cpu / best_cpu, 3)})
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
