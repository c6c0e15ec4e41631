"""Replay speed: records per second through ``gpuwatch replay``'s path on one core.

Run from the repository root::

    .venv/bin/python benchmarks/bench_replay.py                  # writes a 32-GPU x 1 h trace to a temp file
    .venv/bin/python benchmarks/bench_replay.py --trace t.jsonl  # or times an existing trace

It times what the command does, end to end: reading the JSON Lines file, parsing and
validating each record (telemetry.records), and every detector (collector.detect), the
best of ``--repeat`` runs (a shared machine's noise only ever adds time), as wall-clock
records/s and as records per second of this process's own CPU time (what one core
does when other work shares the machine; the load average is recorded). The trace comes
from the incident generator (benchmarks/incidents), so the detectors have real work:
baselines, peers, incidents opening and closing. Pinned to one CPU where the OS allows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.incidents.generate import Fleet
from collector.detect.replay import read_trace, replay


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trace", help="an existing JSON Lines trace (default: generate one)")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    path = args.trace
    tmp = None
    if path is None:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8")  # noqa: SIM115
        for rec in Fleet(nodes=args.nodes, hours=args.hours, seed=1).records():
            tmp.write(rec.to_json() + "\n")
        tmp.close()
        path = tmp.name
    size = os.path.getsize(path)
    best = best_cpu = float("inf")
    records = anomalies = 0
    try:
        for _ in range(args.repeat):
            began, began_cpu = time.perf_counter(), time.process_time()
            result = replay(read_trace(path))
            best = min(best, time.perf_counter() - began)
            best_cpu = min(best_cpu, time.process_time() - began_cpu)
            records, anomalies = result.records, len(result.anomalies)
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    out = {"records": records, "bytes": size, "anomalies": anomalies, "best_s": round(best, 3),
           "records_per_s": round(records / best), "cpu_s": round(best_cpu, 3),
           "records_per_cpu_s": round(records / best_cpu), "load_avg_1m": os.getloadavg()[0],
           "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
