"""The Kafka side of the collector: a consumer group that commits only what is stored.

Loop: fetch a batch across the assigned partitions, hand it to the
:class:`~collector.ingest.Ingestor` (decode, validate, one database transaction, dead
letters), then commit the Kafka offsets and, once that succeeded, persist each partition's
resume offset, in that order. So:

* a collector killed mid-batch re-reads from its last commit, and idempotent writes make
  the re-read harmless;
* when the database is away, every database step (the write, a database dead letter, the
  resume offsets) is retried with backoff, partitions paused, while the consumer keeps
  polling so the group does not expel it; nothing is skipped and the process never exits
  for it;
* a message that cannot be decoded or validated is dead-lettered (:mod:`collector.deadletter`:
  cut to fit the dead-letter producer's request limit, or recorded in the database when
  even that cannot be produced) and the partition moves on. A message larger than the
  fetch limit, which the Kafka client skips, is recorded by reference.

Rebalances keep what is still valid. Partitions revoked wait for the batch in flight (or
give it up if the database is away: then their decoders are reset). A partition assigned
again to this collector keeps its decoders and resumes where it stopped, unless another
member committed past that; any other partition is rewound to its stored resume offset
(the oldest last keyframe among its streams, since frames are deltas), after its
committed offset was noted as "already handled".

It is the Kafka :class:`~collector.source.Source` of the one consume loop
(:class:`~collector.loop.ConsumeLoop`); dead letters and keyframe requests go back through
:class:`~collector.replies.KafkaReplies`.

A watcher reads the partitions' end offsets every few seconds: the lag gauge is the end
offset minus what was consumed (so it cannot read 0 while a partition stalls), and a
partition with messages waiting that delivered nothing for ``stall_after_s`` is reported
(metric, rate-limited log line) and its fetch restarted. Keyframe requests go to the
control topic, keyed by node. Repeated errors are logged once, then counted
(:class:`~telemetry.ratelimit.RateLimitedLog`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError, RecordTooLargeError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from collector.ingest import Inbound, Ingestor
from collector.kafkastart import retry_start
from collector.loop import DB_MAX_BACKOFF_S
from collector.replies import KafkaReplies
from collector.settings import ConsumerTuning
from collector.store.writer import DB_UNAVAILABLE
from telemetry.control import DEFAULT_TOPIC
from telemetry.ratelimit import RateLimitedLog

__all__ = ["DB_UNAVAILABLE", "KafkaSource"]

log = logging.getLogger(__name__)

PositionsLoad = Callable[[str], Awaitable[Mapping[int, int]]]  # (topic) -> {partition: resume_offset}
PositionsSave = Callable[[str, Mapping[int, int]], Awaitable[None]]  # (topic, {partition: offset})


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KafkaSource) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.owner.revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.owner.assigned(assigned)


class KafkaSource:
    """Consumes ``topic`` as member of ``group``: the batches of the consume loop."""

    def __init__(
        self,
        ingestor: Ingestor,
        replies: KafkaReplies,
        bootstrap: str,
        topic: str = DEFAULT_TOPIC,
        group: str = "gpuwatch-collector",
        load_positions: PositionsLoad | None = None,
        save_positions: PositionsSave | None = None,
        max_records: int = 5000,
        client_kwargs: Mapping[str, Any] | None = None,
        tuning: ConsumerTuning | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ingestor = ingestor
        self.replies = replies
        self.topic = topic
        self.group = group
        self.bootstrap = bootstrap
        self.max_records = max_records
        self.load_positions = load_positions
        self.save_positions = save_positions
        self.tuning = tuning or ConsumerTuning()
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self.lag: dict[int, int] = {}
        self.stalled: dict[int, float] = {}  # partition -> seconds without a record while behind
        self.joined = False  # the group gave this member an assignment (an empty one too): /readyz
        self._kw = dict(client_kwargs or {})
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # held while a batch is handled and committed
        self._revoking = False
        self._interrupt = asyncio.Event()  # ends a wait for the database early (rebalance, stop)
        self._db_down = False
        self._processed: dict[int, int] = {}  # partition -> offset after the last message handled
        self._committed: dict[int, int] = {}  # partition -> offset this member committed last
        self._fetched_to: dict[int, int] = {}  # partition -> offset after the last message fetched
        self._last_record_at: dict[int, float] = {}
        self._to_rewind: dict[TopicPartition, int | None] = {}  # partition -> its committed offset
        self._limited = RateLimitedLog(log)
        self._watcher: asyncio.Task[None] | None = None

    # ---- lifecycle ----
    async def start(self) -> None:
        """Connect the consumer (waits, retrying, while the broker is away), then watch lag and stalls."""
        t = self.tuning
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=self.max_records,
            fetch_max_wait_ms=t.fetch_max_wait_ms, fetch_max_bytes=t.fetch_max_bytes,
            max_partition_fetch_bytes=t.max_partition_fetch_bytes, **self._kw,
        )
        await retry_start(self._consumer.start, "the consumer", self.bootstrap, self._stopping, self._limited)
        self._consumer.subscribe([self.topic], listener=_Rebalance(self))
        self._watcher = asyncio.create_task(self._watch())

    async def flush(self, timeout: float) -> bool:
        """Nothing is buffered here: what was fetched is stored and committed by the loop."""
        return True

    async def shutdown(self, timeout: float) -> None:
        """Stop fetching (the batch in flight gives up if the database is away) and leave the group."""
        self._stopping.set()
        self._interrupt.set()
        self.ingestor.abandon()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError, TimeoutError):
                await self._watcher
        if self._consumer is not None:
            try:
                await asyncio.wait_for(self._consumer.stop(), timeout)
            except (KafkaError, TimeoutError) as exc:
                log.warning("stopping the Kafka client: %s", exc)

    def assignment(self) -> set[int]:
        """The partitions this member of the group reads now (none before it joined)."""
        return {tp.partition for tp in self._consumer.assignment()} if self._consumer is not None else set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # ---- rebalances ----
    async def revoked(self, revoked: list[TopicPartition]) -> None:
        """Before a rebalance: let the batch in flight finish (it gives up if the database is away)."""
        self._revoking = True
        self._interrupt.set()
        try:
            async with self._lock:
                pass
        finally:
            self._revoking = False
            if not self._stopping.is_set():
                self._interrupt.clear()
        await self.ingestor.release({tp.partition for tp in revoked})  # the detectors' state, for the next owner
        log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))

    async def assigned(self, assigned: list[TopicPartition]) -> None:
        assert self._consumer is not None
        mine = {tp.partition for tp in assigned}
        for partition in (self.ingestor.streams.partitions() | set(self._processed)
                          | set(self.ingestor.partition_nodes)) - mine:
            self.ingestor.reset_partition(partition, None)  # another collector's now
            self._processed.pop(partition, None)
            self._committed.pop(partition, None)
        self._to_rewind = {tp: c for tp, c in self._to_rewind.items() if tp.partition in mine}
        kept: list[int] = []
        for tp in assigned:
            try:
                committed = await self._consumer.committed(tp)
            except KafkaError as exc:
                self._limited.warning("committed", "committed offset of partition %d unknown (%s); "
                                      "rewinding it from its resume offset", tp.partition, exc)
                committed = None
                done = None
            else:
                done = self._processed.get(tp.partition)
            self._last_record_at[tp.partition] = self.clock()
            ours = self._committed.get(tp.partition)
            if committed is None and ours is not None:
                # We committed here, the broker has no commit: it lost its data (restarted
                # empty). Read its new log from the start; the decoders stay, since the agents'
                # streams go on (a frame the broker lost shows as a sequence gap).
                self.counters["log_resets"] += 1
                self._limited.warning(f"reset:{tp.partition}", "partition %d: the broker has no committed offset "
                                      "although this collector committed %d: it lost its data (restarted empty?); "
                                      "reading the partition from its beginning", tp.partition, ours)
                self.ingestor.stored_below.pop(tp.partition, None)
                self._committed.pop(tp.partition, None)
                self._processed.pop(tp.partition, None)
                await self._seek_start(tp)
                kept.append(tp.partition)
                continue
            if done is not None and (committed is None or committed <= done):
                # still ours and nobody went further: the decoders are valid from here on
                self.ingestor.mark_stored(tp.partition, done)
                self._consumer.seek(tp, done)
                self._fetched_to[tp.partition] = done
                kept.append(tp.partition)
                continue
            self.ingestor.reset_partition(tp.partition, committed)
            self._processed.pop(tp.partition, None)
            self._fetched_to.pop(tp.partition, None)
            self._to_rewind[tp] = committed
        if self._to_rewind:
            self._consumer.pause(*self._to_rewind)
        self.joined = True
        log.info("partitions assigned: %s (decoders kept for %s)", sorted(mine), kept or "none")

    async def _rewind_pending(self) -> None:
        """Seek newly assigned partitions to their resume offsets (read from the database, retried)."""
        if not self._to_rewind:
            return
        assert self._consumer is not None
        positions: Mapping[int, int] = {}
        if self.load_positions is not None:
            try:
                positions = await self.load_positions(self.topic)
            except DB_UNAVAILABLE as exc:
                self.counters["db_retries"] += 1
                self._limited.warning("positions-load", "resume offsets cannot be read (database: %s); "
                                      "partitions %s wait", exc, sorted(tp.partition for tp in self._to_rewind))
                await self._sleep(1.0)
                return
        pending, self._to_rewind = self._to_rewind, {}
        assignment = self._consumer.assignment()
        for tp, committed in pending.items():
            if tp not in assignment:
                continue
            resume = positions.get(tp.partition)
            if committed is None:
                await self._seek_start(tp)
            elif resume is not None and resume < committed:
                self._consumer.seek(tp, resume)
                self._fetched_to[tp.partition] = resume
                log.info("partition %d: rewound from %d to keyframe offset %d", tp.partition, committed, resume)
            else:
                self._consumer.seek(tp, committed)
                self._fetched_to[tp.partition] = committed
            self._last_record_at[tp.partition] = self.clock()
        self._consumer.resume(*[tp for tp in pending if tp in assignment])

    async def _seek_start(self, tp: TopicPartition) -> None:
        """Read ``tp`` from its first offset (known at once, for the lag and the stall watch)."""
        assert self._consumer is not None
        await self._consumer.seek_to_beginning(tp)
        try:
            first = (await asyncio.wait_for(self._consumer.beginning_offsets([tp]), 10.0))[tp]
        except (KafkaError, TimeoutError, KeyError):
            self._fetched_to.pop(tp.partition, None)
        else:
            self._fetched_to[tp.partition] = first

    # ---- the source ----
    async def fetch(self) -> list[Inbound] | None:
        assert self._consumer is not None
        if self._stopping.is_set():
            return None
        await self._rewind_pending()
        try:
            fetched = await self._consumer.getmany(timeout_ms=200, max_records=self.max_records)
        except ConsumerStoppedError:
            return None
        except RecordTooLargeError as exc:
            await self._too_large(exc)
            return []
        except KafkaError as exc:
            self.counters["fetch_errors"] += 1
            self._limited.warning(f"fetch:{type(exc).__name__}", "fetch failed: %s: %s",
                                  type(exc).__name__, exc)
            await self._sleep(1.0)
            return []
        return self._inbound(fetched) if fetched else []

    def holding(self) -> asyncio.Lock:
        return self._lock

    def _inbound(self, fetched: Mapping[TopicPartition, list[Any]]) -> list[Inbound]:
        now = self.clock()
        batch: list[Inbound] = []
        for tp, msgs in fetched.items():
            if not msgs:
                continue
            before = self._fetched_to.get(tp.partition)
            first = msgs[0].offset
            if before is not None and first < before:
                # aiokafka went back by itself: the offset was out of range, so the broker's log
                # is shorter than what we read (a broker that lost its data). What is stored
                # below `before` says nothing about the new log.
                self.counters["log_resets"] += 1
                self.ingestor.stored_below.pop(tp.partition, None)
                self._limited.warning(f"reset:{tp.partition}", "partition %d restarted at offset %d after %d: "
                                      "the broker lost this partition's log (restarted empty?)",
                                      tp.partition, first, before)
            elif before is not None and first > before:
                self.counters["offsets_skipped"] += first - before
                self._limited.warning(f"skip:{tp.partition}", "partition %d: offsets %d to %d were gone before "
                                      "they were read (retention?)", tp.partition, before, first - 1)
            self._fetched_to[tp.partition] = msgs[-1].offset + 1
            self._last_record_at[tp.partition] = now
            batch += [Inbound(tp.partition, m.offset, m.key or b"", m.value or b"", tuple(m.headers or ()))
                      for m in msgs]
        return batch

    def give_up(self) -> str | None:
        if self._stopping.is_set():
            return "stopping"
        return "rebalance" if self._revoking else None

    def abandoned(self, partitions: set[int]) -> None:
        for partition in partitions:  # its decoders are gone: a reassignment must rewind it
            self._processed.pop(partition, None)

    async def database_away(self, exc: BaseException, delay: float) -> None:
        """Pause consumption and wait ``delay`` (less if a rebalance or a stop comes).

        No polling meanwhile: a poll during a rebalance waits for the new assignment, which
        waits for :meth:`revoked`, which waits for this batch. An outage longer than
        aiokafka's ``max_poll_interval_ms`` makes the group reassign the partitions; the
        batch is then given up and re-read, by this member or another.
        """
        assert self._consumer is not None
        self.counters["db_retries"] += 1
        self._db_down = True
        self._limited.warning("db", "database unavailable (%s: %s); consumption paused, retrying",
                              type(exc).__name__, exc)
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(*assignment)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._interrupt.wait(), delay)

    def database_back(self) -> None:
        if not self._db_down:
            return
        assert self._consumer is not None
        self._db_down = False
        self._limited.resolved("db", "database reachable again; consumption resumed")
        paused = self._consumer.paused() - set(self._to_rewind)
        if paused:
            self._consumer.resume(*paused)

    async def stored(self, batch: Sequence[Inbound]) -> None:
        """Commit the batch's offsets, then save the resume offsets (see the module's docstring)."""
        assert self._consumer is not None
        offsets = {TopicPartition(self.topic, msg.partition): msg.offset + 1 for msg in batch}
        for tp, next_offset in offsets.items():
            self._processed[tp.partition] = next_offset
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance: the next owner re-reads, writes are idempotent
            self.counters["commit_errors"] += 1
            self._limited.warning("commit", "offset commit failed: %s: %s", type(exc).__name__, exc)
        else:
            self._committed.update((tp.partition, offset) for tp, offset in offsets.items())
            # After the commit, never before: a resume offset saved for offsets not committed
            # would be too new for the committed one (a delta between the two whose keyframe
            # came before the new resume offset could not be decoded on the re-read). A crash
            # between commit and save leaves the older resume offset: a longer re-read only.
            if self.save_positions is not None:
                await self._save_positions()
        for tp, next_offset in offsets.items():
            self.ingestor.mark_stored(tp.partition, next_offset)
            end = self._consumer.highwater(tp)
            if end is not None:
                self.lag[tp.partition] = max(0, end - next_offset)

    async def _save_positions(self) -> None:
        assert self.save_positions is not None
        backoff = 0.5
        while True:
            try:
                await self.save_positions(self.topic, self.ingestor.resume_offsets())
            except DB_UNAVAILABLE as exc:
                if self._stopping.is_set() or self._revoking:
                    return  # older saved offsets only cost a longer re-read
                await self.database_away(exc, backoff)
                backoff = min(DB_MAX_BACKOFF_S, backoff * 2)
                continue
            self.database_back()
            return

    # ---- messages the client skipped ----
    async def _too_large(self, exc: RecordTooLargeError) -> None:
        """aiokafka skipped a message larger than the fetch limit: keep a reference to it."""
        self.counters["too_large"] += 1
        args = exc.args
        tp = args[1] if len(args) > 2 and isinstance(args[1], TopicPartition) else None
        offset = args[2] if tp is not None and isinstance(args[2], int) else -1
        reason = (f"message larger than max_partition_fetch_bytes ({self.tuning.max_partition_fetch_bytes}); "
                  "the Kafka client skipped it unread")
        partition = tp.partition if tp is not None else -1
        msg = Inbound(partition, offset, b"", b"")
        while not self._stopping.is_set():
            try:
                await self.replies.dead_letter_elsewhere(msg, reason, "not fetched")
                return
            except DB_UNAVAILABLE as db_exc:
                await self.database_away(db_exc, 1.0)
            except RuntimeError as missing:
                log.error("%s", missing)
                return

    # ---- lag and stalls ----
    async def _watch(self) -> None:
        while not self._stopping.is_set():
            await self._sleep(self.tuning.lag_interval_s)
            if self._stopping.is_set():
                return
            try:
                await self.check_partitions()
            except (KafkaError, TimeoutError) as exc:
                # a broker that does not answer in time is away for now: the watch goes on (it ended on
                # the first timeout, and lag was never updated again)
                self._limited.warning("ends", "end offsets unknown (%s: %s); lag not updated",
                                      type(exc).__name__, str(exc) or "no answer in 10 s")

    async def check_partitions(self) -> None:
        """Lag from the end offsets, and stall detection (then the partition's fetch is restarted)."""
        assert self._consumer is not None
        assignment = list(self._consumer.assignment())
        if not assignment:
            return
        ends = await asyncio.wait_for(self._consumer.end_offsets(assignment), 10.0)
        now = self.clock()
        paused = self._consumer.paused()
        for tp, end in ends.items():
            at = self._fetched_to.get(tp.partition)
            if at is None:
                continue
            behind = max(0, end - at)
            self.lag[tp.partition] = behind
            waiting = behind > 0 and tp not in paused and not self._db_down
            quiet = now - self._last_record_at.get(tp.partition, now)
            key = f"stall:{tp.partition}"
            if waiting and quiet >= self.tuning.stall_after_s:
                if tp.partition not in self.stalled:
                    self.counters["partition_stalls"] += 1
                self.stalled[tp.partition] = quiet
                self._limited.warning(key, "partition %d stalled: no record for %.0f s while %d messages wait "
                                      "(fetch_max_wait_ms %d); restarting its fetch", tp.partition, quiet, behind,
                                      self.tuning.fetch_max_wait_ms)
                async with self._lock:
                    if self._fetched_to.get(tp.partition) == at:
                        self._consumer.seek(tp, at)
            elif tp.partition in self.stalled:
                del self.stalled[tp.partition]
                self._limited.resolved(key, "partition %d flows again", tp.partition)

    # ---- /metrics ----
    def families(self) -> Iterator[Any]:
        """Prometheus families of the consumer and its replies (added to the collector's /metrics)."""
        yield from self.replies.families()
        counted = (
            ("partition_stalls", "gpuwatch_collector_partition_stalls", "times a partition with messages waiting "
             "delivered nothing for stall_after_s"),
            ("db_retries", "gpuwatch_collector_db_retries", "database operations retried while it was away"),
            ("log_resets", "gpuwatch_collector_partition_log_resets",
             "partitions found shorter than what was read (the broker lost data)"),
            ("fetch_errors", "gpuwatch_collector_fetch_errors", "failed Kafka fetches"),
            ("commit_errors", "gpuwatch_collector_commit_errors", "failed Kafka offset commits"),
        )
        for key, name, doc in counted:
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(self.counters.get(key, 0)))
            yield c
        ingest = self.ingestor.counters
        for key, name, doc in (
            ("keyframe_requests", "gpuwatch_collector_keyframe_requests", "keyframe requests sent to agents"),
            ("gpu_uuid_conflicts", "gpuwatch_collector_gpu_uuid_conflicts",
             "GPU UUIDs reported by two nodes at once"),
            ("frames_without_base", "gpuwatch_collector_frames_without_base",
             "delta frames whose base was missing (dead-lettered, keyframe requested)"),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(ingest.get(key, 0)))
            yield c
        g = GaugeMetricFamily("gpuwatch_collector_partition_stalled_seconds",
                              "seconds a partition with messages waiting has delivered nothing (0: flowing)",
                              labels=["partition"])
        for partition in sorted(self._fetched_to):
            g.add_metric([str(partition)], float(self.stalled.get(partition, 0.0)))
        yield g
        g = GaugeMetricFamily("gpuwatch_collector_log_lines_suppressed", "repeated log lines not written")
        g.add_metric([], float(self._limited.suppressed_total))
        yield g
