"""A stored batch cut into slices for the detectors, each event in the slice it is judged in.

Why slices: a consumer hands over up to 5,000 node frames at a time (80,000 records of 8-GPU
nodes), and the detectors judge about 20,000 records a second on one core, so a batch judged
in one call held the event loop for four seconds. The Kafka client's heartbeats run on that
loop: three replicas on a busy 2-core machine missed theirs for the group's 10-s session
timeout, the group rebalanced mid-run, and a fifth of the records were read twice. Judged a
slice at a time, with the loop free between slices, no call holds it for long.

Why events are placed, not cut by position: the engine judges a node's event before that
node's first later record in the batch (:meth:`collector.detect.engine.DetectionEngine.feed_batch`).
Each event goes to the slice holding that record (to the last slice if none), so the slices
judged one after the other are judged exactly as the whole batch would be.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from telemetry.records import EventRecord, GpuRecord

__all__ = ["slices"]


def slices(records: Sequence[GpuRecord], events: Sequence[EventRecord],
           size: int) -> list[tuple[Sequence[GpuRecord], list[EventRecord]]]:
    """``records`` in runs of ``size``, each with the events judged among them."""
    if len(records) <= size:
        return [(records, list(events))]
    parts: list[tuple[Sequence[GpuRecord], list[EventRecord]]] = [
        (records[i:i + size], []) for i in range(0, len(records), size)]
    if not events:
        return parts
    waiting: dict[str, deque[EventRecord]] = {}
    for event in sorted(events, key=lambda e: e.ts):
        waiting.setdefault(event.node, deque()).append(event)
    for part, placed in parts:
        for record in part:
            queue = waiting.get(record.node)
            while queue and queue[0].ts <= record.ts:
                placed.append(queue.popleft())
    last = parts[-1][1]
    for queue in waiting.values():
        last.extend(queue)
    return parts
