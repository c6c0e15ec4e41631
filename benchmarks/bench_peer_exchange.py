"""What the collectors' peer exchange costs (collector/detect/remote.py, collector/peerlink.py).

Two engines judge the two halves of a fleet of serving replicas (one service per 16 of them,
spread over both halves); every ``--every`` seconds of record time each one's summaries are
encoded and the other decodes and absorbs them. Reported: CPU per GPU per exchange on each
side, the bytes a GPU costs on the peers topic, and the same as a share of what detection
itself costs per record (measured in the same run, on the same engines).

    .venv/bin/python benchmarks/bench_peer_exchange.py [--gpus 2000] [--seconds 300] [--every 5]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.detect.engine import DetectionEngine
from collector.detect.remote import decode, encode
from telemetry.records import GpuRecord, ProcessRecord

T0 = 1_767_225_600.0


def _record(t: float, g: int) -> GpuRecord:
    sm = 0.4 + 0.2 * math.sin(2 * math.pi * t / (600 + 7 * g) + g) + 0.02 * math.sin(7.3 * t + g)
    proc = ProcessRecord(pid=1000 + g, namespace="serve", pod=f"api-{g}", service=f"api-{g % 125}")
    return GpuRecord(T0 + t, f"node-{g // 8}", f"GPU-{g:08x}", {"DCGM_FI_PROF_SM_ACTIVE": sm,
                                                              "DCGM_FI_DEV_GPU_UTIL": 100 * sm},
                     gpu_index=g % 8, processes=[proc])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--gpus", type=int, default=2000)
    p.add_argument("--seconds", type=int, default=300)
    p.add_argument("--every", type=float, default=5.0)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    halves = [DetectionEngine(), DetectionEngine()]
    feed_s = pub_s = take_s = 0.0
    records = exchanges = published = sent_bytes = 0
    due = args.every
    for s in range(args.seconds):
        t0 = time.process_time()
        for g in range(args.gpus):
            halves[(g // 8) % 2].feed(_record(float(s), g))
        feed_s += time.process_time() - t0
        records += args.gpus
        if s >= due:
            due += args.every
            for i, engine in enumerate(halves):
                t0 = time.process_time()
                value = encode(str(i), engine.summaries())
                t1 = time.process_time()
                _, summaries = decode(value, halves[1 - i].remote.wanted())
                halves[1 - i].absorb(summaries)
                t2 = time.process_time()
                pub_s, take_s = pub_s + t1 - t0, take_s + t2 - t1
                published += len(summaries)
                sent_bytes += len(value)
            exchanges += 1
    out = {
        "gpus": args.gpus, "seconds": args.seconds, "every_s": args.every, "exchanges": exchanges,
        "detect_us_per_record": round(1e6 * feed_s / records, 2),
        "publish_us_per_gpu_summary": round(1e6 * pub_s / published, 2),
        "absorb_us_per_gpu_summary": round(1e6 * take_s / published, 2),
        "bytes_per_gpu_summary": round(sent_bytes / published, 1),
        # per record (a GPU-second at 1 Hz): each GPU is summarised once per exchange by its owner and
        # absorbed by each other replica that judges its service (one here)
        "exchange_us_per_record": round(1e6 * (pub_s + take_s) / records, 2),
        "shadows": [len(e.remote.shadows) for e in halves],
    }
    out["exchange_share_of_detection"] = round(out["exchange_us_per_record"] / out["detect_us_per_record"], 3)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
