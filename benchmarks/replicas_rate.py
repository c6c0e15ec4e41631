"""Samples/s of a collector tier from ``bench_pipeline.py ingest --replicas N`` results.

Why a rate from the middle of the run: with several replicas the first commit waits for the
consumer group to settle (each replica joins, the partitions are reassigned), and the last
commits are a tail of whichever replica had more left; both weigh on a rate taken from the
launch. The rate between the commits of 20% and of 80% of the messages is what the tier
sustains once running. Both are printed, with the CPU each component used over the whole run.

    python benchmarks/replicas_rate.py 'docs/bench-runs/pipeline-replicas-2026-12-06-*.json'
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path
from typing import Any


def middle_rate(result: dict[str, Any], lo: float = 0.2, hi: float = 0.8) -> float:
    """GPU-samples/s between the commits of ``lo`` and ``hi`` of the messages."""
    p = result["pipeline"]
    total, per_message = p["messages"], p["records_per_message"]
    timeline: list[tuple[float, int]] = [(t, m) for t, m in p["timeline_s_messages"]]
    t_lo = next(t for t, m in timeline if m >= lo * total)
    t_hi = next(t for t, m in timeline if m >= hi * total)
    return float((hi - lo) * total * per_message / (t_hi - t_lo))


def main(pattern: str) -> int:
    print("| run | replicas | GPU-samples/s, 20-80% of the messages | from launch | collector cores | PostgreSQL cores "
          "| idle cores |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path in sorted(glob.glob(pattern)):
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        cpu = d["cpu_during_ingest"]
        print(f"| {Path(path).stem} | {d['parameters']['collector_replicas']} | {middle_rate(d):,.0f} "
              f"| {d['pipeline']['gpu_samples_per_s_from_launch']:,} | {cpu['components']['collector']['cores']:.2f} "
              f"| {cpu['components']['postgresql']['cores']:.2f} | {cpu['machine_idle_cores']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/bench-runs/pipeline-replicas-*.json"))
