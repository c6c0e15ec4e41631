"""The sender's asyncio loop: connect and reconnect, rounds of sends, spooling while Kafka is away, shutdown.

What the loop decides by time it asks of its clock once and of the plain bookkeeping in
:mod:`agent.sender_state` (backoffs, the stop deadline, budget waits, keyframe requests)
and :mod:`agent.sender_memory` (memory's bounds and age); what it sends goes through
:mod:`agent.kafka_io`, what it spools through :mod:`agent.sender_spool`. The reasons for
the rules (order per GPU, nothing lost, keyframes after a break) are in :mod:`agent.sender`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Literal

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from agent import kafka_io
from agent.batching import PartitionOf, Round, settle
from agent.kafka_settings import KafkaSettings
from agent.sender_memory import Memory
from agent.sender_spool import SpoolSide
from agent.sender_state import Backoff, Breaks, BudgetGate, Clock, StopDeadline, Tally
from telemetry.ratelimit import RateLimitedLog

log = logging.getLogger("agent.sender")  # the sender's modules log under one name, as before the split

POLL_S = 0.05  # how often a running round checks for overflow and the stop deadline
IDLE_S = 0.5  # how long an idle loop sleeps before looking at the spool again

Outcome = Literal["sent", "failed", "idle", "abandoned"]


class DeliveryLoop:
    """Runs on the sender's event loop (:meth:`main`); :class:`~agent.sender.Sender` is its face to the threads."""

    def __init__(self, settings: KafkaSettings, side: SpoolSide, *, batch_messages: int, batch_bytes: int,
                 spool_poll_s: float, gate: BudgetGate, keyframes: Callable[[str], None], errors: RateLimitedLog,
                 clock: Clock, close_spool: bool) -> None:
        self.settings = settings
        self.side = side
        self.spool = side.spool
        self.memory: Memory = side.memory
        self.tally: Tally = side.tally
        self._batch_n = batch_messages
        self._batch_b = batch_bytes
        self._spool_poll = spool_poll_s
        self.gate = gate
        self._keyframes = keyframes
        self._errors = errors
        self._clock = clock
        self._close_spool = close_spool
        self.partition_of = PartitionOf()
        self.stop = StopDeadline()
        self.breaks = Breaks()
        self.reconnect = Backoff(settings.reconnect_backoff_ms / 1000.0, settings.reconnect_backoff_max_ms / 1000.0)
        self.connected = False
        self._outage_logged = False
        self._wake: asyncio.Event | None = None

    # ------------------------------------------------------------------ called on the loop from other threads

    def wake(self) -> None:
        self.memory.wake_pending = False
        if self._wake is not None:
            self._wake.set()

    def request_stop(self, timeout: float) -> None:
        self.stop.request(self._clock(), timeout)
        if self._wake is not None:
            self._wake.set()

    def drained(self) -> bool:
        """Nothing in memory, in flight, moving or in the spool (safe from any thread)."""
        return not self.memory.busy() and len(self.spool) == 0

    # ------------------------------------------------------------------ the loop

    async def main(self) -> None:
        self._wake = asyncio.Event()
        producer: AIOKafkaProducer | None = None
        self.breaks.drops_seen = self.memory.dropped + self.spool.dropped_total
        try:
            while True:
                now = self._clock()
                self._check_drops()
                if self.stop.finished(now, connected=producer is not None, drained=self.drained):
                    break
                if producer is None:
                    await self._spool_if_due()
                    if self.reconnect.due(now) and await self._paced("connect"):
                        continue
                    if self.reconnect.due(now):
                        producer = await self._connecting()
                        if producer is None:
                            self.reconnect.failed(self._clock())
                        continue
                    await self._sleep(self.reconnect.wait(now, self._spool_poll))
                    continue
                try:
                    outcome = await self._round(producer)
                except (KafkaError, OSError) as exc:  # a spool read, or the producer outside a send
                    self._errors.warning("round", "sender round failed: %s", exc)
                    outcome = "failed"
                except Exception:  # a bug must not end delivery: log it, reconnect, go on
                    log.exception("unexpected error in the Kafka sender; reconnecting")
                    outcome = "failed"
                if outcome == "abandoned":
                    break  # _shutdown closes the producer within what is left of the stop timeout
                if outcome == "failed":
                    self.tally.send_errors += 1
                    await self._drop_producer(producer)
                    producer = None
                    self.reconnect.failed(self._clock())
                elif outcome == "sent":
                    self.reconnect.succeeded()
        finally:
            await self._shutdown(producer)

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(seconds, 0.0))
        self._wake.clear()

    def _check_drops(self) -> None:
        why = self.breaks.dropped(self.memory.dropped + self.spool.dropped_total)
        if why:
            self._keyframes(why)

    async def _paced(self, what: str) -> bool:
        """Wait for the transport's CPU budget if it ran over (not while stopping; see
        :class:`~agent.sender_state.BudgetGate` for why at most once in a row); True if it waited."""
        wait = self.gate.delay(what, stopping=self.stop.stopping)
        if wait <= 0:
            return False
        t0 = self._clock()
        await self._sleep(wait)
        self.gate.waited(what, self._clock() - t0)
        return True

    async def _spool_if_due(self) -> None:
        """While Kafka is down, spool at once (a kill then loses nothing), unless the transport is over its
        CPU budget: then only what memory's bounds or age (``spool_after_ms``) force out."""
        if self.memory.wants_spool(self._clock()) or (self.breaks.down and self.gate.pacer.delay() <= 0):
            await self.side.to_spool()

    # ------------------------------------------------------------------ connection

    async def _connecting(self) -> AIOKafkaProducer | None:
        """Connect, spooling meanwhile (a blackholed broker can take ``request_timeout_ms``)."""
        task = asyncio.ensure_future(self._connect())
        while not task.done():
            await asyncio.wait({task}, timeout=POLL_S)
            if task.done():
                break
            if self.stop.passed(self._clock()):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return None
            await self._spool_if_due()
        return task.result()

    async def _connect(self) -> AIOKafkaProducer | None:
        timeout = self.settings.request_timeout_ms / 1000.0
        try:
            config = self.settings.producer_config()
        except (OSError, ssl.SSLError) as exc:
            self._errors.error("config", "cannot build the Kafka client configuration: %s", exc)
            self._went_down()
            return None
        try:
            producer = AIOKafkaProducer(**config)
        except (KafkaError, ValueError, TypeError) as exc:  # e.g. a compression codec that is not installed
            self._errors.error("producer", "cannot create the Kafka producer: %s", exc)
            self._went_down()
            return None
        try:
            await asyncio.wait_for(producer.start(), timeout)
            await asyncio.wait_for(producer.partitions_for(self.settings.topic), timeout)
        except (KafkaError, OSError) as exc:
            (log.debug if self._outage_logged else log.warning)(
                "Kafka %s unreachable (%s); spooling to %s and retrying", self.settings.bootstrap_servers,
                str(exc) or type(exc).__name__, self.spool.directory)
            self._outage_logged = True
            self._went_down()
            self.tally.send_errors += 1
            self.connected = False
            await kafka_io.close_quietly(producer)
            return None
        except asyncio.CancelledError:
            await kafka_io.close_quietly(producer)
            raise
        self._outage_logged = False
        why = self.breaks.connected()
        if not self.connected:
            log.info("connected to Kafka %s (topic %s); %d messages to replay from the spool",
                     self.settings.bootstrap_servers, self.settings.topic, len(self.spool))
        self.connected = True
        self.tally.connects += 1
        self._keyframes(why)
        return producer

    def _went_down(self) -> None:
        """Kafka is unreachable: spool from now on, and let the spooled frames start with keyframes."""
        why = self.breaks.unreachable()
        if why:
            self._keyframes(why)

    async def _drop_producer(self, producer: AIOKafkaProducer) -> None:
        if self.connected and not self._outage_logged:
            self._outage_logged = True
            log.warning("lost Kafka %s; spooling to %s until it is back", self.settings.bootstrap_servers,
                        self.spool.directory)
        self.connected = False
        self._went_down()
        await kafka_io.close_quietly(producer, self.settings.request_timeout_ms / 1000.0)

    # ------------------------------------------------------------------ rounds

    async def _next_round(self) -> Round | None:
        """The next batch: the spool's head while it holds anything, else what is in memory."""
        if len(self.spool):
            return await self.side.read_round(self._batch_n, self._batch_b)
        msgs = self.memory.take_batch(self._batch_n, self._batch_b, self._clock())
        if not msgs:
            return None
        return Round(msgs, None, from_spool=False)

    async def _round(self, producer: AIOKafkaProducer) -> Outcome:
        """Send one batch and settle it: delivered parts committed, failed parts in the spool."""
        if len(self.spool) and await self._paced("replay"):
            return "idle"  # replaying can wait for the transport's budget; memory overflow still spools
        batch = await self._next_round()
        if batch is None:
            if self.memory.idle_waiting:
                await self._sleep(IDLE_S)
                self.memory.end_idle()
            return "idle"
        task = asyncio.ensure_future(kafka_io.send_all(producer, self.settings.topic, batch.msgs, self.partition_of))
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=POLL_S)
                if task.done():
                    break
                if self.stop.passed(self._clock()):
                    await self._abandon(batch)
                    return "abandoned"
                if self.memory.wants_spool(self._clock()):
                    await self._overflow(batch)
            return await self._settle(batch, task.result())
        except BaseException:
            # never lose a batch taken from memory: what is not in the spool goes back to the head of memory
            self.memory.abort_inflight([] if batch.from_spool else batch.msgs[batch.unspooled():])
            raise
        finally:
            if not task.done():
                task.cancel()

    async def _overflow(self, batch: Round) -> None:
        """Memory is over its bound or too old while a batch is in flight: spool, keeping order.

        The part of the batch not yet in the spool goes first (it stays in flight, now with
        sequence numbers), then memory.
        """
        start = batch.unspooled()
        written = await self.side.to_spool(batch.msgs[start:], give_back_head=False)
        if written is None or batch.from_spool:
            return
        batch.spooled(start, *written)

    async def _abandon(self, batch: Round) -> None:
        """Stop deadline reached with a batch in flight: make sure it is in the spool (it may be resent)."""
        log.warning("stop: %d messages still in flight at the deadline; kept in the spool", len(batch.msgs))
        if not batch.from_spool:
            await self.side.to_spool(batch.msgs[batch.unspooled():])
        self.memory.inflight_settled()

    async def _settle(self, batch: Round, results: list[BaseException | None]) -> Outcome:
        done = settle(batch, results)
        for msg, error in done.rejected:
            self.tally.rejected += 1
            self._errors.error("rejected", "Kafka rejected a message for key %r (%s); dropped", msg.key, error)
        self.side.delivered.update(done.done_seqs)
        self.tally.sent += done.delivered
        if batch.from_spool:
            self.tally.replayed += done.delivered
            self.breaks.replayed()
        if batch.seqs is not None:
            await self.side.commit_delivered()
        if done.failed:
            await self.side.to_spool(done.failed)  # older than anything still in memory: they go first
        self.memory.inflight_settled()
        if done.not_acked:
            self._errors.warning("unacked", "%d of %d messages not acknowledged (%s); they wait in the spool",
                                 done.not_acked, len(batch.msgs), done.first_error or "error")
            return "failed"
        why = self.breaks.round_sent(spool_empty=not len(self.spool))
        if why:
            log.info("replay of the spool done")
            self._keyframes(why)
        return "sent"

    async def _shutdown(self, producer: AIOKafkaProducer | None) -> None:
        self.memory.finish()
        try:
            self.side.retry.clear()  # the last chance: try the disk even if it failed a moment ago
            await self.side.to_spool()
            lost = self.memory.lose_rest()
            if lost:  # the disk failed: nothing more can be done
                log.error("stop: %d messages could not be spooled and are lost", lost)
            if producer is not None:
                self.connected = False
                try:
                    await asyncio.wait_for(producer.stop(), timeout=self.stop.left(self._clock()))
                except (KafkaError, OSError) as exc:
                    log.warning("stop: closing the Kafka producer: %s", exc)
            await self.side.call(self.spool.sync)
            if len(self.spool):
                log.info("stop: %d messages (%d bytes) left in the spool %s for the next start",
                         len(self.spool), self.spool.bytes, self.spool.directory)
        finally:
            if self._close_spool:
                await self.side.call(self.spool.close)
