"""The transport-neutral ingest step: retries after a store failure, DLQ, duplicates, events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from agent.simulate.trace import generate_trace
from collector.ingest import Inbound, Ingestor
from telemetry.codec import FrameEncoder
from telemetry.records import EventRecord, GpuRecord

FRAME = (("type", b"frame"),)


class FlakyStore:
    """Counts rows; raises OSError (a database outage) while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.rows: list[GpuRecord] = []
        self.events: list[EventRecord] = []

    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        if self.down:
            raise OSError("connection refused")
        self.rows.extend(records)
        self.events.extend(events)


def _frames(n: int, per_frame: int = 3) -> tuple[list[Inbound], int]:
    records = list(generate_trace(gpus=1, seconds=n * per_frame))
    encoder = FrameEncoder(keyframe_every=60)
    msgs = [Inbound(0, i, b"k", encoder.encode(records[i * per_frame:(i + 1) * per_frame]), FRAME) for i in range(n)]
    return msgs, len(records)


def _ingestor(store: FlakyStore, dead: list[str]) -> Ingestor:
    async def dead_letter(_msg: Inbound, reason: str) -> None:
        dead.append(reason)

    return Ingestor(store, dead_letter)


def test_a_batch_retried_after_a_store_failure_loses_nothing() -> None:
    """Decoders move past a batch as it is decoded; the retry must not decode delta frames again."""
    msgs, total = _frames(10)
    store, dead = FlakyStore(), []  # type: ignore[var-annotated]
    ingestor = _ingestor(store, dead)

    async def run() -> None:
        await ingestor.handle(msgs[:3])
        store.down = True
        for _ in range(3):
            with contextlib.suppress(OSError):
                await ingestor.handle(msgs[3:6])
        store.down = False
        await ingestor.handle(msgs[3:6])
        await ingestor.handle(msgs[6:])

    asyncio.run(run())
    assert dead == []
    assert len(store.rows) == total
    assert len({(r.gpu, r.ts) for r in store.rows}) == total


def test_garbage_duplicates_and_bad_events_are_handled_without_blocking() -> None:
    msgs, total = _frames(6)
    store, dead = FlakyStore(), []  # type: ignore[var-annotated]
    ingestor = _ingestor(store, dead)
    batch = [
        *msgs[:3],
        Inbound(0, 3, b"x", b"garbage", FRAME),
        Inbound(0, 4, b"x", msgs[2].value, FRAME),  # a redelivered frame (producer retry)
        Inbound(0, 5, b"x", b"{not json", (("type", b"event"),)),
        Inbound(0, 6, b"x", b'{"ts": 1.0, "node": "n", "gpu": "G", "kind": "xid", "code": 79}', (("type", b"event"),)),
        Inbound(0, 7, b"x", b"?", (("type", b"mystery"),)),
        *(Inbound(0, 8 + i, m.key, m.value, m.headers) for i, m in enumerate(msgs[3:])),
    ]
    asyncio.run(ingestor.handle(batch))
    assert len(store.rows) == total
    assert [e.code for e in store.events] == [79]
    assert len(dead) == 3
    assert dead[0].startswith("undecodable frame") and dead[1].startswith("bad event")
    assert "unknown message type" in dead[2]
    assert ingestor.counters["duplicate_frames"] == 1


class ValidatingStore(FlakyStore):
    """Refuses a whole batch (before any write) if one record is bad, as Store.write does."""

    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        if any(r.metrics.get("DCGM_FI_DEV_GPU_TEMP") == -999 for r in records):
            raise ValueError("DCGM_FI_DEV_GPU_TEMP out of range")
        await super().write(records, events)


def test_a_frame_the_store_refuses_is_dead_lettered_and_the_rest_stored() -> None:
    records = list(generate_trace(gpus=2, seconds=4))
    records[1].metrics["DCGM_FI_DEV_GPU_TEMP"] = -999  # one bad record, in one GPU's frame

    def check(record: GpuRecord) -> None:
        if record.metrics.get("DCGM_FI_DEV_GPU_TEMP") == -999:
            raise ValueError("DCGM_FI_DEV_GPU_TEMP out of range")

    by_gpu: dict[str, list[GpuRecord]] = {}
    for r in records:
        by_gpu.setdefault(r.gpu, []).append(r)
    msgs = [Inbound(0, i, gpu.encode(), FrameEncoder().encode(rs), FRAME) for i, (gpu, rs) in enumerate(by_gpu.items())]
    store, dead = ValidatingStore(), []  # type: ignore[var-annotated]
    ingestor = _ingestor(store, dead)
    ingestor.validate = check
    asyncio.run(ingestor.handle(msgs))
    assert len(dead) == 1 and dead[0].startswith("invalid record")
    assert records[0].gpu != records[1].gpu  # generate_trace interleaves the GPUs
    assert {r.gpu for r in store.rows} == {records[0].gpu}
    assert len(store.rows) == len(by_gpu[records[0].gpu])
