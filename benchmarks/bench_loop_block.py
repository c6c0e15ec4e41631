"""How long the collector's event loop is held while it judges a batch, with and without slices.

Why: the Kafka client's heartbeats run on the collector's event loop. A consumer fetch of 5,000
node frames (the generated fleet's 8-GPU nodes framed by the agent's own :class:`Framer`, two
records a frame as at 1 Hz with the 1 s maximum delay) was judged in one call, and the loop was
held for seconds; three replicas on a busy 2-core machine missed the group's 10-s session timeout
(tests/test_replicas.py, thirtieth session). This runs the collector's path without the database
(``Ingestor.handle`` into a store that keeps nothing, then the detectors) over the same fleet in
batches of 5,000 messages, once decoded and judged whole (as before the thirty-first session) and
once decoded 500 messages and judged 4,000 records at a time, alternated ``--repeat`` times, while
another task notes each turn of the loop: the longest gap between turns is the longest a heartbeat
could have waited. CPU is reported as the median of the runs too: on a shared 2-core VM a run's CPU
time moves by 10-20%.

    .venv/bin/python benchmarks/bench_loop_block.py --json docs/bench-runs/loop-block-2026-12-07.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.detect.engine import DetectionEngine
from collector.ingest import DECODE_SLICE, JUDGE_SLICE, Inbound, Ingestor
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import Message
from tests.support.fleet_frames import fleet_messages

WHOLE = 1 << 30


class _Nowhere:
    """A store that keeps nothing, but lets the loop turn as a database write does."""

    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        await asyncio.sleep(0)


class _Hooks:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()

    async def prepare(self, records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
        return None

    async def release(self, nodes: set[str]) -> None:
        return None

    def forget(self, nodes: set[str]) -> None:
        return None

    def judging(self) -> asyncio.Lock:
        return self.lock


def one_run(messages: list[Message], judge_slice: int, batch: int, decode_slice: int) -> dict[str, float]:
    async def dead(_msg: Inbound, reason: str) -> None:
        raise AssertionError(reason)

    engine = DetectionEngine()
    ingestor = Ingestor(_Nowhere(), dead, on_committed=engine.feed_batch, judge_slice=judge_slice,  # type: ignore[arg-type]
                        decode_slice=decode_slice)
    ingestor.detection = _Hooks()
    inbound = [Inbound(0, i, m.key, m.value, m.headers) for i, m in enumerate(messages)]
    turns: list[float] = []

    async def go() -> None:
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                turns.append(time.perf_counter())
                await asyncio.sleep(0)
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        for i in range(0, len(inbound), batch):
            await ingestor.handle(inbound[i : i + batch])
        turns.append(time.perf_counter())
        stop.set()
        await tick

    cpu = time.process_time()
    asyncio.run(go())
    gaps = [b - a for a, b in itertools.pairwise(turns)]
    return {"cpu_s": time.process_time() - cpu, "longest_hold_s": max(gaps),
            "holds_over_1s": float(sum(1 for g in gaps if g > 1.0))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--hours", type=float, default=0.75)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--batch", type=int, default=5000, help="messages per consumer fetch (the consumer's default)")
    ap.add_argument("--slice", type=int, default=JUDGE_SLICE, help="records judged between turns")
    ap.add_argument("--decode-slice", type=int, default=DECODE_SLICE, help="messages decoded between turns")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    messages, records = fleet_messages(args.nodes, args.hours, args.seed)
    runs: dict[str, list[dict[str, float]]] = {"whole": [], "sliced": []}
    for _ in range(args.repeat):
        runs["whole"].append(one_run(messages, WHOLE, args.batch, WHOLE))
        runs["sliced"].append(one_run(messages, args.slice, args.batch, args.decode_slice))
    best = {k: {m: min(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    whole, sliced = best["whole"], best["sliced"]
    out: dict[str, Any] = {"messages": len(messages), "records": records, "batch": args.batch, "slice": args.slice,
                           "decode_slice": args.decode_slice,
                           "python": platform.python_version(), "machine": platform.machine(), "runs": runs,
                           "best": best, "cpu_ratio_sliced_over_whole": sliced["cpu_s"] / whole["cpu_s"],
                           "longest_hold_ratio": sliced["longest_hold_s"] / whole["longest_hold_s"],
                           "cpu_median_ratio": statistics.median(r["cpu_s"] for r in runs["sliced"])
                           / statistics.median(r["cpu_s"] for r in runs["whole"])}
    for k, b in best.items():
        print(f"{k:7s} cpu {b['cpu_s']:.2f} s  longest hold of the loop {b['longest_hold_s'] * 1000:.0f} ms  "
              f"holds over 1 s: {b['holds_over_1s']:.0f}")
    print(f"{records} records in {len(messages)} messages; CPU sliced/whole {out['cpu_ratio_sliced_over_whole']:.3f} "
          f"(best), {out['cpu_median_ratio']:.3f} (median)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
