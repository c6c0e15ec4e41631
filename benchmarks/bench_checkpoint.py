"""What saving detector state costs (issue 16, item 2): bytes per GPU, and CPU per save and load.

The generated fleet (``--nodes`` nodes of 8 GPUs, ``--hours`` at 1 Hz) is judged by one engine;
at the end each node's state is saved (``collector.detect.checkpoint.dump``) and taken over by a
fresh engine (``load`` and ``DetectionEngine.adopt``), ``--repeat`` times (best of). Compared
with the cost of judging the records themselves, in the same run: the service saves every node
fed every ``--every`` seconds (``checkpoint_s``), so the share of detection CPU it adds is the save
time per GPU over that many of the GPU's records.

    python benchmarks/bench_checkpoint.py --nodes 4 --hours 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.detect import checkpoint
from collector.detect.engine import DetectionEngine
from telemetry.records import GpuRecord
from tests.support.incidents.generate import Fleet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--every", type=float, default=300.0, help="seconds between saves (the collector's default)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    items = list(Fleet(nodes=args.nodes, hours=args.hours, seed=args.seed).records())
    engine = DetectionEngine()
    t = time.process_time()
    records = 0
    for item in items:
        if isinstance(item, GpuRecord):
            engine.feed(item)
            records += 1
        else:
            engine.feed_event(item)
    judge_s = time.process_time() - t
    nodes = sorted({st.node for st in engine.gpus.values()})
    gpus = len(engine.gpus)
    best_dump = best_load = float("inf")
    size = 0
    for _ in range(args.repeat):
        t = time.process_time()
        blobs = [checkpoint.dump(engine.node_state(n)) for n in nodes]
        best_dump = min(best_dump, time.process_time() - t)
        t = time.process_time()
        fresh = DetectionEngine()
        for blob, shape in blobs:
            fresh.adopt(checkpoint.load(blob, shape))
        best_load = min(best_load, time.process_time() - t)
        size = sum(len(b) for b, _ in blobs)
    per_record_us = judge_s / records * 1e6
    dump_per_gpu_us = best_dump / gpus * 1e6
    out = {
        "nodes": len(nodes), "gpus": gpus, "hours": args.hours, "records": records,
        "judge_us_per_record": round(per_record_us, 2),
        "state_bytes_per_gpu": round(size / gpus),
        "dump_us_per_gpu": round(dump_per_gpu_us, 1), "load_us_per_gpu": round(best_load / gpus * 1e6, 1),
        # saved every ``every`` s: that many records of the GPU judged between two saves (1 Hz)
        "every_s": args.every, "save_share_of_detection": round(dump_per_gpu_us / (args.every * per_record_us), 4),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
