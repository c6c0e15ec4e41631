"""A stored batch judged slice by slice (collector/batch_slices.py, collector/ingest.py).

Why: a batch of 5,000 node frames judged in one call held the event loop for seconds, and the
Kafka client's heartbeats with it; three replicas on a busy 2-core machine missed the group's
session timeout, the group rebalanced mid-run and a fifth of the records were read twice
(tests/test_replicas.py failed one CI run in four). The slices must be judged exactly as the
whole batch: each event before its node's first later record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.batch_slices import slices
from collector.detect import DetectionEngine
from collector.detect.engine import Change
from collector.ingest import Inbound, Ingestor
from telemetry.records import EventRecord, GpuRecord
from tests.test_ingest_streams import MemoryStore, _Hooks, frames, inbound, make


class _Order(DetectionEngine):
    """An engine that only writes down the order it is handed records and events in."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str, float]] = []

    def feed(self, record: GpuRecord) -> list[Change]:
        self.log.append(("r", record.node, record.ts))
        return []

    def feed_event(self, event: EventRecord) -> list[Change]:
        self.log.append(("e", event.node, event.ts))
        return []


_NODES = st.sampled_from(["a", "b", "c"])
_RECORDS = st.lists(st.tuples(_NODES, st.integers(0, 40)), max_size=60)
_EVENTS = st.lists(st.tuples(_NODES, st.integers(-5, 45), st.sampled_from(["xid", "ecc"])), max_size=12)


@settings(max_examples=300, deadline=None)
@given(_RECORDS, _EVENTS, st.integers(1, 25))
def test_slices_judged_in_turn_are_judged_as_the_whole_batch(recs: list[tuple[str, int]],
                                                             evs: list[tuple[str, int, str]], size: int) -> None:
    """Records out of time order across and within nodes, events before, among and after them."""
    records = [GpuRecord(float(t), n, f"GPU-{n}", {}) for n, t in recs]
    events = [EventRecord(float(t), n, f"GPU-{n}", kind) for n, t, kind in evs]
    whole, cut = _Order(), _Order()
    whole.feed_batch(records, events)
    parts = slices(records, events, size)
    for part, placed in parts:
        cut.feed_batch(part, placed)
    assert cut.log == whole.log
    assert [r for part, _ in parts for r in part] == records
    assert all(0 < len(part) <= size for part, _ in parts) or not records


def test_a_large_batch_leaves_the_event_loop_free_between_its_slices() -> None:
    """A batch of 48 frames of 100 records, judged 500 records at a time: another task (the Kafka
    client's heartbeat) runs between the slices, and the detection service's lock is held across
    them, so a save cannot take a node's state from the middle of the batch."""
    values, records = frames(0, 48, per=100)
    judged: list[int] = []
    turns: list[int] = []
    hooks = _Hooks()

    def judge(recs: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
        assert hooks.lock.locked()
        judged.append(len(recs))

    async def main() -> None:
        ingestor: Ingestor = make(MemoryStore(), [])
        ingestor.detection, ingestor.on_committed, ingestor.judge_slice = hooks, judge, 500
        stop = asyncio.Event()

        async def heartbeat() -> None:
            while not stop.is_set():
                turns.append(len(judged))
                await asyncio.sleep(0)
        beat = asyncio.create_task(heartbeat())
        batch: list[Inbound] = inbound(values)
        await ingestor.handle(batch)
        stop.set()
        await beat
    asyncio.run(main())
    assert sum(judged) == len(records) == 4800 and max(judged) == 500 and len(judged) == 10
    assert {1, 5, 9} <= set(turns)  # the other task ran between slices
