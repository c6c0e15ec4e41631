"""A capacity plan for a fleet of N GPUs at 1 Hz, derived from measured figures (issue 16 item 6).

Why a script: every number in docs/deploy.md's plan comes from a measurement recorded in
docs/bench-runs/, and when a measurement is taken again the plan should follow it, not be
edited by hand. Inputs (each a JSON file a benchmark wrote):

* ``--wire``: bytes per GPU-sample on the Kafka log as the agent sends them
  (benchmarks/bench_wire.py);
* ``--ingest``: the collector's CPU per GPU-sample at the agent's frame shape (2 records per
  frame), run as the chart runs it, detection and the REST API on
  (benchmarks/bench_deploy_sizing.py: ``collector_cpu_us_per_sample``);
* ``--store``: bytes per GPU-sample in TimescaleDB, uncompressed and compressed, sample and
  process rows with their indexes (benchmarks/bench_timescale_compression.py on a real server;
  bench_deploy_sizing.py --timescale's PGlite figures are read too);
* ``--checkpoint``: detector state per GPU (benchmarks/bench_checkpoint.py).

Run from the repository root::

    .venv/bin/python benchmarks/capacity_plan.py --gpus 100000 --markdown

Assumptions, printed with the plan: every GPU busy at the agent's 1 s interval (an upper
bound: idle GPUs stretch to 10 s), 8 GPUs per node, Kafka replication 3 and 1 day of
retention, a collector replica given 1 core at most 60% busy (headroom for rebalances and
catch-up), raw samples kept uncompressed for 1 day and compressed for 13 more.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

RUNS = Path(__file__).resolve().parent.parent / "docs" / "bench-runs"


def _read(path: Path, *keys: str) -> float:
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    for key in keys:
        data = data[key]
    return float(data)


def _store(path: Path) -> dict[str, float]:
    """Raw bytes per GPU-sample before and after compression, from either benchmark's JSON."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if "raw" in data:  # bench_timescale_compression.py (a real server)
        return {"raw_b": float(data["raw"]["bytes_per_gpu_sample_before"]),
                "packed_b": float(data["raw"]["bytes_per_gpu_sample_after"])}
    return {"raw_b": float(data["bytes_per_sample_uncompressed"]),  # bench_deploy_sizing.py --timescale
            "packed_b": float(data["bytes_per_sample_compressed"])}


def plan(gpus: int, wire_b: float, cpu_us: float, raw_b: float, packed_b: float, state_b: float, *,
         gpus_per_node: int = 8, replication: int = 3, kafka_days: float = 1.0, busy: float = 0.6,
         raw_days: float = 1.0, packed_days: float = 13.0) -> dict[str, float]:
    """The plan's figures for ``gpus`` GPUs sampled once a second."""
    rate = float(gpus)  # GPU-samples per second
    day = 86_400.0
    cores = rate * cpu_us / 1e6
    replicas = max(2, math.ceil(cores / busy))
    nodes = math.ceil(gpus / gpus_per_node)
    # partitions: at least the replicas, a multiple of them so each gets the same number, and about
    # 100-200 nodes each so that keying by node (telemetry/wire.py) still balances by hashing
    partitions = replicas * max(1, math.ceil(nodes / 150 / replicas))
    return {
        "gpus": gpus, "nodes": nodes, "gpu_samples_per_s": rate,
        "kafka_mb_per_s": rate * wire_b / 1e6,
        "kafka_gb_per_day": rate * wire_b * day / 1e9,
        "kafka_disk_gb": rate * wire_b * day * kafka_days * replication / 1e9,
        "partitions": partitions,
        "collector_cores": cores, "collector_replicas": replicas,
        "detector_state_gb": gpus * state_b / 1e9,
        "db_rows_per_s": rate,
        "db_gb_per_day_raw": rate * raw_b * day / 1e9,
        "db_gb_per_day_compressed": rate * packed_b * day / 1e9,
        "db_disk_tb_raw_retention": rate * day * (raw_b * raw_days + packed_b * packed_days) / 1e12,
    }


def markdown(p: dict[str, float], inputs: dict[str, float]) -> str:
    rows = [
        ("GPUs / nodes (8 GPUs each)", f"{p['gpus']:,.0f} / {p['nodes']:,.0f}"),
        ("GPU-samples/s (every GPU busy, 1 Hz)", f"{p['gpu_samples_per_s']:,.0f}"),
        (f"Kafka ingress ({inputs['wire_b']:.1f} B per GPU-sample on the log)",
         f"{p['kafka_mb_per_s']:.1f} MB/s; {p['kafka_gb_per_day']:,.0f} GB/day"),
        ("Kafka disk (replication 3, 1 day)", f"{p['kafka_disk_gb']:,.0f} GB"),
        ("`gpu.telemetry` partitions", f"{p['partitions']:,.0f}"),
        (f"collector CPU ({inputs['cpu_us']:.0f} µs per GPU-sample, detection on)",
         f"{p['collector_cores']:.1f} cores"),
        ("collector replicas (1 core each, 60% busy)", f"{p['collector_replicas']:,.0f}"),
        (f"detector state ({inputs['state_b']:,.0f} B per GPU, saved with the offsets)",
         f"{p['detector_state_gb']:.2f} GB"),
        ("database rows/s (samples; process rows alike)", f"{p['db_rows_per_s']:,.0f}"),
        (f"database, raw per day ({inputs['raw_b']:.0f} B/sample uncompressed; "
         f"{inputs['packed_b']:.1f} compressed)",
         f"{p['db_gb_per_day_raw']:,.0f} GB; {p['db_gb_per_day_compressed']:,.0f} GB compressed"),
        ("database disk for raw samples (1 day uncompressed + 13 compressed)",
         f"{p['db_disk_tb_raw_retention']:.1f} TB"),
    ]
    return "\n".join(["| | |", "|---|---:|"] + [f"| {a} | {b} |" for a, b in rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--gpus", type=int, default=100_000)
    ap.add_argument("--wire", type=Path, default=RUNS / "wire-2026-12-06-node-deflate.json")
    ap.add_argument("--ingest", type=Path, default=RUNS / "deploy-sizing.json")
    # a new database: real metric columns (migration 0091), 1-hour rollups in 30-day chunks (0092)
    ap.add_argument("--store", type=Path, default=RUNS / "timescale-chunks-real-2026-12-04-after.json")
    ap.add_argument("--checkpoint", type=Path, default=RUNS / "checkpoint-2026-12-03.json")
    ap.add_argument("--markdown", action="store_true", help="print the plan as a markdown table")
    args = ap.parse_args()
    try:
        inputs = {
            "wire_b": _read(args.wire, "bytes_per_gpu_sample"),
            "cpu_us": _read(args.ingest, "collector_cpu_us_per_sample"),
            **_store(args.store),
            "state_b": _read(args.checkpoint, "state_bytes_per_gpu"),
        }
    except (OSError, KeyError, ValueError, TypeError) as exc:
        print(f"capacity_plan: cannot read a measured figure: {exc}", file=sys.stderr)
        return 2
    p = plan(args.gpus, inputs["wire_b"], inputs["cpu_us"], inputs["raw_b"], inputs["packed_b"], inputs["state_b"])
    print(markdown(p, inputs) if args.markdown else json.dumps({"inputs": inputs, "plan": p}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
