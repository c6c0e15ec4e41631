"""The Kafka side of the collector: a consumer group that commits only what is stored.

Loop: fetch a batch across the assigned partitions, hand it to the
:class:`~collector.ingest.Ingestor` (decode, validate, one database transaction), then
persist each partition's resume offset and commit the Kafka offsets, in that order. So:

* a collector killed mid-batch re-reads from its last commit, and idempotent writes make
  the re-read harmless;
* when the database is down, :meth:`Ingestor.handle` raises; the consumer pauses its
  partitions, retries the same batch with backoff, and resumes once it is stored;
* a frame that cannot be decoded or validated is produced to the dead-letter topic
  with the reason in a header, counted, and the partition moves on.

On assignment, each partition is rewound to its stored resume offset (the oldest last
keyframe among its GPUs), because frames are deltas and a fresh decoder needs a keyframe.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from collector.ingest import Inbound, Ingestor

log = logging.getLogger(__name__)

# The database is down or restarting: retry the same batch. Anything else is a bug or bad
# data that validation missed, and is raised rather than retried for ever.
DB_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
)

PositionsLoad = Callable[[str], Any]  # async (topic) -> dict[partition, resume_offset]
PositionsSave = Callable[[str, Mapping[int, int]], Any]  # async (topic, {partition: offset})


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KafkaIngest) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            self.owner.ingestor.reset_partition(tp.partition, None)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.owner.rewind(assigned)


class KafkaIngest:
    """Consumes ``topic`` as member of ``group`` and feeds the ingestor."""

    def __init__(
        self,
        ingestor: Ingestor,
        bootstrap: str,
        topic: str = "gpu.telemetry",
        group: str = "gpuwatch-collector",
        dlq_topic: str | None = None,
        load_positions: PositionsLoad | None = None,
        save_positions: PositionsSave | None = None,
        max_records: int = 5000,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.ingestor = ingestor
        self.topic = topic
        self.dlq_topic = dlq_topic or f"{topic}.dlq"
        self.group = group
        self.bootstrap = bootstrap
        self.max_records = max_records
        self.load_positions = load_positions
        self.save_positions = save_positions
        self.counters: Counter[str] = Counter()
        self.lag: dict[int, int] = {}
        self._kw = dict(client_kwargs or {})
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._stopping = asyncio.Event()
        ingestor.dead_letter = self._dead_letter

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **self._kw)
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=self.max_records,
            fetch_max_wait_ms=50,  # aiokafka's 500 ms default alone would eat a quarter of the 2 s freshness budget
            **self._kw,
        )
        await self._consumer.start()
        self._consumer.subscribe([self.topic], listener=_Rebalance(self))

    async def rewind(self, assigned: list[TopicPartition]) -> None:
        assert self._consumer is not None
        positions: dict[int, int] = {}
        if self.load_positions is not None:
            positions = dict(await self.load_positions(self.topic))
        for tp in assigned:
            committed = await self._consumer.committed(tp)
            resume = positions.get(tp.partition)
            self.ingestor.reset_partition(tp.partition, committed)
            if resume is not None and committed is not None and resume < committed:
                self._consumer.seek(tp, resume)
                log.info("partition %d: rewound from %d to keyframe offset %d", tp.partition, committed, resume)

    async def _dead_letter(self, msg: Inbound, reason: str) -> None:
        assert self._producer is not None
        headers = [*msg.headers, ("dlq_reason", reason.encode()[:1000]),
                   ("dlq_source", f"{self.topic}/{msg.partition}/{msg.offset}".encode())]
        await self._producer.send_and_wait(self.dlq_topic, msg.value, key=msg.key, headers=headers)
        log.warning("dead-lettered %s/%d@%d: %s", self.topic, msg.partition, msg.offset, reason)

    async def run(self) -> None:
        assert self._consumer is not None
        backoff = 0.5
        while not self._stopping.is_set():
            fetched = await self._consumer.getmany(timeout_ms=200, max_records=self.max_records)
            batch = [
                Inbound(tp.partition, m.offset, m.key or b"", m.value or b"", tuple(m.headers or ()))
                for tp, msgs in fetched.items() for m in msgs
            ]
            if not batch:
                continue
            while not self._stopping.is_set():
                try:
                    await self.ingestor.handle(batch)
                    break
                except DB_UNAVAILABLE as exc:
                    await self._db_down(exc, backoff)
                    backoff = min(30.0, backoff * 2)
            else:
                return
            backoff = 0.5
            if self._consumer.paused():
                self._consumer.resume(*self._consumer.paused())
            await self._commit(fetched)

    async def _db_down(self, exc: BaseException, delay: float) -> None:
        assert self._consumer is not None
        self.counters["db_retries"] += 1
        log.warning("database unavailable (%s); pausing consumption, retry in %.1fs", exc, delay)
        self._consumer.pause(*self._consumer.assignment())
        await asyncio.sleep(delay)

    async def _commit(self, fetched: Mapping[TopicPartition, list[Any]]) -> None:
        assert self._consumer is not None
        if self.save_positions is not None:
            await self.save_positions(self.topic, self.ingestor.resume_offsets())
        offsets = {tp: msgs[-1].offset + 1 for tp, msgs in fetched.items() if msgs}
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance: the next owner re-reads, writes are idempotent
            self.counters["commit_errors"] += 1
            log.warning("offset commit failed: %s", exc)
        for tp, next_offset in offsets.items():
            self.ingestor.stored_below[tp.partition] = next_offset
            end = self._consumer.highwater(tp)
            if end is not None:
                self.lag[tp.partition] = max(0, end - next_offset)

    async def stop(self) -> None:
        self._stopping.set()
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await self._producer.stop()
