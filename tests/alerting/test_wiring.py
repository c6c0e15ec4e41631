"""The ingest hook: detection sees exactly the records the store committed, once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from collector.alerting.service import from_rules_file
from collector.ingest import Inbound, Ingestor
from collector.store import Store
from telemetry.codec import FrameEncoder
from telemetry.records import EventRecord, GpuRecord
from tests.detect.helpers import record, trace

FRAME = (("type", b"frame"),)


def _hot(t: float, g: int) -> GpuRecord:
    hot = g == 0 and 200 <= t < 300
    return record(t, g, temp=92 if hot else 70, reasons=0x40 if hot else 0x4, clock=1000 if hot else 1485)


def _messages() -> list[Inbound]:
    encoders = {g: FrameEncoder(keyframe_every=60) for g in range(2)}
    msgs = []
    records = list(trace(320, 2, _hot))
    for i in range(0, len(records), 20):  # ten samples of both GPUs per frame pair
        for g in range(2):
            chunk = [r for r in records[i:i + 20] if r.gpu_index == g]
            msgs.append(Inbound(g, len(msgs), chunk[0].gpu.encode(), encoders[g].encode(chunk), FRAME))
    return msgs


def test_committed_batches_reach_the_detectors_and_failed_ones_do_not(pg_db: str) -> None:
    async def go() -> None:
        store = await Store.open(pg_db, profile="plain")
        detection = from_rules_file(store.pool, None)
        seen: list[int] = []

        class Failing:
            async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
                raise OSError("database down")

        async def dead_letter(_msg: Inbound, reason: str) -> None:
            raise AssertionError(reason)

        def hook(records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
            seen.append(len(records))
            detection.on_committed(records, events)

        msgs = _messages()
        ingestor = Ingestor(Failing(), dead_letter, on_committed=hook)
        with contextlib.suppress(OSError):
            await ingestor.handle(msgs[:4])
        assert seen == []  # nothing stored, nothing judged
        ingestor.store = store
        for i in range(0, len(msgs), 4):
            await ingestor.handle(msgs[i:i + 4])
        assert sum(seen) == 640
        await detection.flush()
        rows = await store.pool.fetch("SELECT kind, gpu, end_ts FROM anomalies")
        assert [(r["kind"], r["gpu"]) for r in rows] == [("thermal_throttle", "GPU-n0-0")]
        assert detection.counters["records"] == 640
        await store.close()

    asyncio.run(go())
