"""``kernels`` messages through the ingest step: stored in the batch's flush, bad ones set aside naming the field.

Why both a real database and a fake sink: the real one shows the whole way (decode, the
store's own refusal of what PostgreSQL cannot hold, idempotent redelivery); the fake one
makes the database go away between the records and the kernels, which is where a retry must
neither lose a window nor dead-letter one twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import replace

from agent.simulate.trace import generate_trace
from collector.ingest import Inbound, Ingestor
from collector.store import Store, validate, validate_event
from collector.store.kernels import KernelStore
from telemetry.codec import FrameEncoder
from telemetry.kernels import KernelStat, KernelWindow
from tests.support.kernel_windows import headers, training
from tests.test_store_plain import T0

FRAME = (("type", b"frame"),)


def _batch() -> tuple[list[Inbound], int]:
    records = list(generate_trace(gpus=1, seconds=6, start=T0.timestamp()))
    frame = Inbound(0, 0, b"g", FrameEncoder().encode(records), FRAME)
    good = training(T0.timestamp())
    no_node = replace(training(T0.timestamp() + 10), node="")  # the stream's header names it
    malformed = json.loads(good.encode())
    malformed["kernels"][1]["occupancy"] = 1.5
    surrogate = replace(good, ts=T0.timestamp() + 20, kernels=(KernelStat("k\ud800", 1, 5, 5),))
    return [frame, Inbound(0, 1, b"g", good.encode(), headers()),
            Inbound(0, 2, b"g", json.dumps(malformed).encode(), headers()),
            Inbound(0, 3, b"g", surrogate.encode(), headers()),
            Inbound(0, 4, b"g", no_node.encode(), headers("node-from-header")),
            Inbound(0, 5, b"g", b"\xff not json", headers())], len(records)


def test_good_windows_are_stored_with_the_batch_and_bad_ones_dead_lettered(pg_db: str) -> None:
    async def main() -> dict[str, object]:
        store = await Store.open(pg_db, now=T0)
        dead: list[tuple[int, str]] = []

        async def dead_letter(msg: Inbound, reason: str) -> None:
            dead.append((msg.offset, reason))

        try:
            ingestor = Ingestor(store, dead_letter, validate, validate_event, kernels=KernelStore(store.pool))
            batch, records = _batch()
            result = await ingestor.handle(batch)
            again = Ingestor(store, dead_letter, validate, validate_event, kernels=KernelStore(store.pool))
            await again.handle([batch[1], batch[4]])  # redelivered (another collector after a rebalance)
            return {
                "result": (result.records, result.dead), "expected_records": records, "dead": dead,
                "counters": (ingestor.counters["kernel_windows"], ingestor.counters["bad_kernels"],
                             again.counters["kernel_windows"]),
                "windows": [tuple(r) for r in await store.pool.fetch(
                    "SELECT node, pid, service FROM kernel_windows ORDER BY ts")],
                "stats": await store.pool.fetchval("SELECT count(*) FROM kernel_stats"),
                "samples": await store.pool.fetchval("SELECT count(*) FROM gpu_samples"),
            }
        finally:
            await store.close()

    out = asyncio.run(main())
    assert out["result"] == (out["expected_records"], 3)
    assert out["samples"] == out["expected_records"]
    assert out["windows"] == [("node-a", 4242, "llm"), ("node-from-header", 4242, "llm")]
    assert out["stats"] == 6
    assert out["counters"] == (2, 3, 0)
    dead = dict(out["dead"])  # type: ignore[call-overload]
    assert sorted(dead) == [2, 3, 5]
    assert dead[2].startswith("bad kernels message: ") and "'kernels[1].occupancy'" in dead[2]
    assert dead[3].startswith("kernels window refused by the store: ") and "'kernels[0].name'" in dead[3]
    assert dead[5].startswith("bad kernels message: ") and "not JSON" in dead[5]


class FlakyKernels:
    """A kernel sink that is away while ``down``, and refuses windows of pid 13."""

    def __init__(self) -> None:
        self.down = False
        self.saved: list[KernelWindow] = []

    async def save(self, windows: Sequence[KernelWindow]) -> int:
        if self.down:
            raise OSError("connection refused")
        if any(w.pid == 13 for w in windows):
            raise ValueError("kernels message field 'pid' is unlucky")
        self.saved.extend(windows)
        return len(windows)


class Records:
    async def write(self, records: Sequence[object], events: Sequence[object] = ()) -> None:
        return None


def test_an_outage_before_the_kernels_are_stored_is_retried_without_loss_or_duplicates() -> None:
    sink, dead = FlakyKernels(), []

    async def dead_letter(msg: Inbound, reason: str) -> None:
        dead.append((msg.offset, reason))

    ingestor = Ingestor(Records(), dead_letter, kernels=sink)
    batch = [Inbound(0, i, b"g", training(T0.timestamp() + i, pid=pid).encode(), headers())
             for i, pid in enumerate((1, 13, 2))]

    async def run() -> None:
        sink.down = True
        for _ in range(2):
            with contextlib.suppress(OSError):
                await ingestor.handle(batch)
        sink.down = False
        await ingestor.handle(batch)

    asyncio.run(run())
    assert [w.pid for w in sink.saved] == [1, 2]
    assert dead == [(1, "kernels window refused by the store: kernels message field 'pid' is unlucky")]
    assert (ingestor.counters["kernel_windows"], ingestor.counters["bad_kernels"]) == (2, 1)


def test_a_collector_without_a_kernel_store_dead_letters_them() -> None:
    dead: list[str] = []

    async def dead_letter(_msg: Inbound, reason: str) -> None:
        dead.append(reason)

    asyncio.run(Ingestor(Records(), dead_letter).handle([Inbound(0, 0, b"g", training(1.0).encode(), headers())]))
    assert dead == ["kernels message: this collector stores no kernel windows"]
