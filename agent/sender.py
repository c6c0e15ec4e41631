"""The agent's Kafka sender: frames to ``gpu.telemetry``, through the on-disk spool when Kafka is away.

Why it is built this way:

* **Sampling never waits.** :meth:`Sender.submit` is called from the sampling thread; it
  appends to an in-memory deque under a lock held for microseconds and at most wakes the
  sender's event loop (a non-blocking write to its self-pipe). It does no disk or network
  I/O. Everything else happens on the sender's own asyncio loop (its thread, or a loop
  the caller gives), and every spool call runs on one worker thread so an fsync never
  stalls the loop either.
* **Nothing lost.** Frames that cannot be delivered (broker down, timeouts, a slow broker
  that lets frames wait longer than ``spool_after_ms``, more than ``memory_max_*`` queued)
  go to the bounded on-disk :class:`~agent.spool.Spool`; ``stop()`` spools what it could
  not deliver in time, and the next Sender on the same directory replays it. Only a full
  spool drops, oldest first, counted in ``dropped_total``. A disk that refuses writes
  (full) keeps what it took; the rest waits in memory, and spool writes back off (1 s
  doubling to 30 s) instead of failing five times a second. Memory holds four times its
  bound before its oldest are dropped, counted apart (``memory_dropped_total``).
* **Per-GPU order.** Messages are keyed by GPU UUID (Kafka's murmur2 partitioner puts a
  GPU on one partition). The spool is one FIFO, and while it holds anything every new
  message goes behind it, so each GPU's frames reach the topic in the order submitted.
  A batch in flight when memory overflows is written to the spool *ahead* of the overflow
  and, once its outcome is known, the delivered part is committed without a resend.
* **Exactly once when the broker is simply away; at least once when an answer is lost.**
  A batch whose acknowledgement is lost (the broker wrote it, then died) is resent from
  the spool after the reconnect. Kafka's idempotent producer (``enable_idempotence``)
  removes the duplicates of the producer's own retries on a real cluster, not those of a
  resend by a new producer after a reconnect; tansu 0.6.0, the test broker, answers
  InitProducerId with an error, so it is off by default. Frames carry a per-GPU sequence
  number, so the collector's store deduplicates either way.
* **Reconnect** with exponential backoff (0.5 s doubling to 30 s). Sends are batched: each
  round (up to ``replay_batch_messages``) is packed into one record batch per partition
  and the batches are pipelined, which keeps a replay at tens of thousands of messages/s.
* **Keyframes after a break.** Frames are deltas; a collector that lost a stream's base
  (a broker that came back empty) decodes nothing until a keyframe. So the sender calls
  ``on_keyframe_needed`` when Kafka becomes unreachable (the spooled frames then start
  with keyframes), after every (re)connect, after a replay empties the spool, and when
  frames are dropped; the agent wires it to :meth:`agent.framing.Framer.request_keyframe`.
* **Its own CPU budget.** The sender's loop and spool worker are the agent's ``transport``
  threads (:mod:`agent.cpuclock`). Work that can wait (replaying the spool, reconnecting,
  spooling while Kafka is down) waits on a :class:`~agent.scheduler.CpuPacer` of
  ``transport_cpu_budget`` when they ran over, so an outage never costs the sampler's budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from agent.batching import PartitionOf, Round, memory_wants_spool
from agent.cpuclock import TRANSPORT, ThreadCpu
from agent.kafka_settings import KafkaSettings
from agent.scheduler import CpuPacer
from agent.spool import Spool, SpoolStats, SpoolWriteError
from agent.stats import as_dict, counter, gauge, snapshot
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

__all__ = ["Message", "Sender"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that name the message, not the connection: resending cannot help, so it is dropped.
REJECTED = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError, CorruptRecordException,
            InvalidTimestampError)
POLL_S = 0.05  # how often a running round checks for overflow and the stop deadline
IDLE_S = 0.5  # how long an idle loop sleeps before looking at the spool again
SPOOL_RETRY_S = (1.0, 30.0)  # after a failed spool write: first and longest wait before the next one


_Outcome = Literal["sent", "failed", "idle", "abandoned"]
KeyframeNeeded = Callable[[str], None]


@snapshot
class SenderStats:
    """The sender's counters and levels for ``/metrics`` (the spool's are in :class:`~agent.spool.SpoolStats`)."""

    sent_total: int = counter("gpuwatch_agent_kafka_sent", "Messages acknowledged by Kafka.")
    spooled_total: int = counter("gpuwatch_agent_kafka_spooled", "Messages written to the on-disk spool.")
    replayed_total: int = counter("gpuwatch_agent_kafka_replayed", "Spooled messages sent after an outage.")
    send_errors_total: int = counter("gpuwatch_agent_kafka_send_errors", "Failed connects and sends to Kafka.")
    rejected_total: int = counter(
        "gpuwatch_agent_kafka_rejected", "Messages Kafka refused for themselves (too large, corrupt): dropped.")
    memory_dropped_total: int = counter(
        "gpuwatch_agent_memory_dropped",
        "Oldest messages dropped from memory while the spool could not take them (its disk failing).")
    memory_messages: int = gauge("gpuwatch_agent_memory_messages", "Messages waiting in memory.")
    memory_bytes: int = gauge("gpuwatch_agent_memory_bytes", "Bytes of messages waiting in memory.")
    connected: int = gauge("gpuwatch_agent_kafka_connected", "1 while the producer is connected.")
    connects_total: int = counter("gpuwatch_agent_kafka_connects", "Connections made to Kafka (first and reconnects).")
    paced_seconds_total: float = counter(
        "gpuwatch_agent_transport_paced_seconds",
        "Seconds the transport's deferrable work (replay, reconnects) waited for its CPU budget.")
    cpu_budget_ratio: float = gauge("gpuwatch_agent_transport_cpu_budget_ratio",
                                    "The transport's CPU budget, fraction of one core.")


class Sender:
    """Delivers :class:`Message` to Kafka in order per key, spooling to disk whenever it cannot.

    Thread mode (default): :meth:`start` runs an event loop in a daemon thread. Loop mode
    (``loop=`` given): the sender runs as a task on that loop; use :meth:`aflush` and
    :meth:`astop` from inside it (the blocking :meth:`flush`/:meth:`stop` would deadlock).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        spool: Spool | str | os.PathLike[str],
        *,
        memory_max_messages: int = 10_000,
        memory_max_bytes: int = 8 << 20,
        spool_after_ms: int = 2_000,
        spool_poll_ms: int = 200,
        replay_batch_messages: int = 5_000,
        replay_batch_bytes: int = 4 << 20,
        loop: asyncio.AbstractEventLoop | None = None,
        on_keyframe_needed: KeyframeNeeded | None = None,
        cpu: ThreadCpu | None = None,
        transport_cpu_budget: float = 0.01,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock  # monotonic seconds: memory age, backoffs, the stop deadline
        self._owns_spool = not isinstance(spool, Spool)
        self.spool = spool if isinstance(spool, Spool) else Spool(spool)
        # a message must fit in a request and in the spool (an entry may take half its bound; 1 KiB for framing)
        self._max_message = min(settings.max_request_bytes, self.spool.max_bytes // 2 - 1024)
        self._mem_max_n = memory_max_messages
        self._mem_max_b = memory_max_bytes
        self._spool_after = spool_after_ms / 1000.0
        self._spool_poll = spool_poll_ms / 1000.0
        self._batch_n = replay_batch_messages
        self._batch_b = replay_batch_bytes
        self._given_loop = loop
        self.on_keyframe_needed = on_keyframe_needed
        self._cpu = cpu or ThreadCpu()
        self._pacer = CpuPacer(transport_cpu_budget, cpu_clock=lambda: self._cpu.seconds(TRANSPORT))
        self._errors = RateLimitedLog(log)
        # shared with submitting threads, guarded by _mlock
        self._mlock = threading.Lock()
        self._memory: deque[Message] = deque()
        self._mem_bytes = 0
        self._mem_oldest = 0.0
        self._inflight = 0  # messages taken from memory for a send, until settled
        self._moving = 0  # messages taken from memory for the spool, until written
        self._idle_waiting = False
        self._wake_pending = False
        self._finished = False
        self._memory_dropped = 0
        # owned by the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuwatch-spool",
                                      initializer=self._cpu.register, initargs=(TRANSPORT,))
        self._thread: threading.Thread | None = None
        self._done: Future[None] | None = None
        self._stopping = False
        self._stop_deadline = 0.0
        self._delivered: set[int] = set()  # spool seqs delivered but not yet committed
        self._partition_of = PartitionOf()
        self._connected = False
        self._down = False  # a connect or send failed and nothing succeeded since: spool at once
        self._outage_logged = False
        self._started = False
        self._spool_retry_at = 0.0  # no spool write before this (monotonic), after one failed
        self._spool_backoff = SPOOL_RETRY_S[0]
        self._paced_for: set[str] = set()  # work that waited once for the budget: it runs next time
        self._replaying = False  # spooled messages were sent since the spool was last empty
        self._drops_seen = 0  # memory and spool drops already answered with a keyframe request
        self.sent_total = 0
        self.spooled_total = 0
        self.replayed_total = 0
        self.send_errors_total = 0
        self.rejected_total = 0
        self.connects_total = 0

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start delivering (returns at once; the first connection is made in the background)."""
        if self._started:
            raise RuntimeError("Sender already started")
        self._started = True
        if self._given_loop is not None:
            self._loop = self._given_loop
            self._done = asyncio.run_coroutine_threadsafe(self._main(), self._given_loop)
            return
        ready = threading.Event()
        done: Future[None] = Future()
        self._done = done

        def run() -> None:
            # asyncio.Runner cancels what is left (e.g. a producer abandoned at the stop deadline) on exit.
            self._cpu.register(TRANSPORT)
            with asyncio.Runner() as runner:
                self._loop = runner.get_loop()
                ready.set()
                try:
                    runner.run(self._main())
                except BaseException as exc:
                    log.exception("the Kafka sender's loop failed")
                    done.set_exception(exc)  # stop() re-raises it
                    return
            done.set_result(None)
            self._cpu.unregister()

        self._thread = threading.Thread(target=run, name="gpuwatch-sender", daemon=True)
        self._thread.start()
        ready.wait()

    def submit(self, msg: Message) -> None:
        """Queue ``msg`` for delivery. Never blocks on I/O; safe from any thread.

        After :meth:`stop` the message is written to the spool directly (if it is still open).
        """
        size = msg.size
        if size > self._max_message:
            raise ValueError(f"message of {size} bytes exceeds {self._max_message} bytes (max_request_bytes, "
                             "or half the spool's bound)")
        with self._mlock:
            if not self._finished:
                if not self._memory:
                    self._mem_oldest = self._clock()
                self._memory.append(msg)
                self._mem_bytes += size
                over = len(self._memory) > self._mem_max_n or self._mem_bytes > self._mem_max_b
                wake = (over or self._idle_waiting) and not self._wake_pending
                if wake:
                    self._wake_pending = True
                # Only when spool writes fail (disk trouble) can memory grow this far: drop the oldest.
                while len(self._memory) > 4 * self._mem_max_n or self._mem_bytes > 4 * self._mem_max_b:
                    self._mem_bytes -= self._memory.popleft().size
                    self._memory_dropped += 1
                late = False
            else:
                late, wake = True, False
        if late:
            self._submit_late(msg)
        elif wake and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop just closed: stop() spools what is left
                self._loop.call_soon_threadsafe(self._on_wake)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is acknowledged by Kafka; False on timeout."""
        deadline = self._clock() + timeout
        while not self._drained():
            if self._clock() >= deadline:
                return False
            time.sleep(0.01)
        return True

    async def aflush(self, timeout: float = 10.0) -> bool:
        """:meth:`flush` for callers on the sender's own loop."""
        deadline = self._clock() + timeout
        while not self._drained():
            if self._clock() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Deliver what can be delivered within ``timeout`` s, spool the rest, release everything."""
        if not self._started:
            self._finish_unstarted()
            return
        assert self._done is not None
        if not self._done.done():
            self._request_stop(timeout)
        try:
            self._done.result(timeout + 30.0)
        finally:
            if self._thread is not None:
                self._thread.join(timeout=5.0)
            self._shutdown_io(wait=True)

    async def astop(self, timeout: float = 10.0) -> None:
        """:meth:`stop` for callers on the sender's own loop."""
        if not self._started:
            self._finish_unstarted()
            return
        assert self._done is not None
        if not self._done.done():
            self._request_stop(timeout)
        await asyncio.wrap_future(self._done)
        self._shutdown_io(wait=False)

    def _shutdown_io(self, *, wait: bool) -> None:
        with contextlib.suppress(RuntimeError):  # already shut down
            self._io.submit(self._cpu.unregister)  # the worker leaves the CPU ledger before it ends
        self._io.shutdown(wait=wait)

    def snapshots(self) -> tuple[SenderStats, SpoolStats]:
        """The sender's and its spool's counters, for /metrics (the spool's include earlier runs)."""
        with self._mlock:
            memory, memory_bytes = len(self._memory), self._mem_bytes
        return SenderStats(
            sent_total=self.sent_total, spooled_total=self.spooled_total, replayed_total=self.replayed_total,
            send_errors_total=self.send_errors_total, rejected_total=self.rejected_total,
            memory_dropped_total=self._memory_dropped, memory_messages=memory, memory_bytes=memory_bytes,
            connected=int(self._connected), connects_total=self.connects_total,
            paced_seconds_total=self._pacer.waited_s, cpu_budget_ratio=self._pacer.fraction,
        ), self.spool.stats()

    def stats(self) -> dict[str, int | float]:
        """:meth:`snapshots` as one dict, for logs, benchmarks and tests."""
        return as_dict(*self.snapshots())

    @property
    def connected(self) -> bool:
        return self._connected

    # ------------------------------------------------------------------ thread-safe helpers

    def _on_wake(self) -> None:
        self._wake_pending = False
        if self._wake is not None:
            self._wake.set()

    def _request_stop(self, timeout: float) -> None:
        def request() -> None:
            self._stop_deadline = self._clock() + timeout
            self._stopping = True
            if self._wake is not None:
                self._wake.set()

        assert self._loop is not None
        self._loop.call_soon_threadsafe(request)

    def _drained(self) -> bool:
        with self._mlock:
            if self._memory or self._inflight or self._moving:
                return False
        return len(self.spool) == 0

    def _take_memory(self) -> list[Message]:
        """Everything in memory, counted as moving (so :meth:`flush` does not see a gap) until settled."""
        with self._mlock:
            out = list(self._memory)
            self._memory.clear()
            self._mem_bytes = 0
            self._moving += len(out)
        return out

    def _settled(self, moved: int, give_back: Sequence[Message] = ()) -> None:
        """``moved`` messages taken by :meth:`_take_memory` are in the spool, or ``give_back`` returns to memory."""
        with self._mlock:
            self._moving -= moved
            if give_back:
                self._memory.extendleft(reversed(give_back))
                self._mem_bytes += sum(m.size for m in give_back)
                self._mem_oldest = self._clock()

    def _memory_wants_spool(self) -> bool:
        with self._mlock:
            if not self._memory:
                return False
            return memory_wants_spool(len(self._memory), self._mem_bytes, self._clock() - self._mem_oldest,
                                      self._mem_max_n, self._mem_max_b, self._spool_after)

    def _submit_late(self, msg: Message) -> None:
        try:
            self.spool.append([msg])
            self.spooled_total += 1
        except (OSError, RuntimeError) as exc:
            self._memory_dropped += 1
            self._errors.error("late", "message submitted after the sender stopped could not be spooled (%s); "
                               "dropped", exc)

    def _finish_unstarted(self) -> None:
        with self._mlock:
            self._finished = True
        leftovers = self._take_memory()
        if leftovers:
            self.spool.append(leftovers)
            self.spooled_total += len(leftovers)
        self._settled(len(leftovers))
        self._shutdown_io(wait=True)
        if self._owns_spool:
            self.spool.close()

    # ------------------------------------------------------------------ the loop

    async def _spool_io(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, fn, *args)

    async def _append(self, msgs: list[Message]) -> tuple[int, int]:
        """Append to the spool on the worker thread: (first seq, how many went in; the rest did not)."""
        try:
            first = await self._spool_io(self.spool.append, msgs)
            written = len(msgs)
        except SpoolWriteError as exc:
            first, written = exc.first, exc.written
            self._spool_retry_at = self._clock() + self._spool_backoff
            with self._mlock:
                waiting = len(self._memory) + len(msgs) - written
            self._errors.error("spool", "spool write failed (%s): %d of %d messages spooled, %d wait in memory; "
                               "next spool write in %.0f s", exc.cause, written, len(msgs), waiting,
                               self._spool_backoff)
            self._spool_backoff = min(SPOOL_RETRY_S[1], self._spool_backoff * 2)
        else:
            if self._spool_backoff > SPOOL_RETRY_S[0]:
                self._errors.resolved("spool", "spool writes succeed again")
            self._spool_backoff = SPOOL_RETRY_S[0]
        self.spooled_total += written
        return first, written

    def _spool_blocked(self) -> bool:
        """A spool write failed a moment ago: do not try again yet (memory holds the messages)."""
        return self._clock() < self._spool_retry_at

    async def _to_spool(self, head: Sequence[Message] = (), *, give_back_head: bool = True) -> tuple[int, int] | None:
        """Append ``head`` then everything in memory, in that order: (first seq, how many went in), None if none.

        What the disk did not take goes back to the head of memory (``head`` too if
        ``give_back_head``), so a later attempt keeps the order.
        """
        if self._spool_blocked():
            if head and give_back_head:
                self._settled(0, head)
            return None
        behind = self._take_memory()
        msgs = [*head, *behind]
        written = 0
        first = 0
        try:
            if msgs:
                first, written = await self._append(msgs)
        finally:
            back: Sequence[Message] = ()
            if written < len(msgs):
                back = msgs[written:] if give_back_head else behind[max(0, written - len(head)):]
            self._settled(len(behind), back)
        return (first, written) if written else None

    async def _spool_memory(self) -> None:
        await self._to_spool()

    async def _spool_if_due(self) -> None:
        """While Kafka is down, spool at once (a kill then loses nothing), unless the transport is over its
        CPU budget: then only what memory's bounds or age (``spool_after_ms``) force out."""
        if self._memory_wants_spool() or (self._down and self._pacer.delay() <= 0):
            await self._spool_memory()

    def _keyframes(self, why: str) -> None:
        """Ask for a keyframe of every GPU (see the module docstring for when)."""
        if self.on_keyframe_needed is not None:
            self.on_keyframe_needed(why)

    def _check_drops(self) -> None:
        drops = self._memory_dropped + self.spool.dropped_total
        if drops > self._drops_seen:
            self._drops_seen = drops
            self._keyframes("frames were dropped")

    async def _paced(self, what: str) -> bool:
        """Wait for the transport's CPU budget if it ran over (not while stopping); True if it waited.

        At most one wait (``max_delay_s``) in a row for a piece of work ``what`` ("connect",
        "replay"): the work that may not wait (spooling what is sampled during an outage, the
        control topic's client retrying) can keep the bucket empty, and a reconnect or a replay
        that waited for a full bucket would never run (the fault harness found an agent that had
        not reconnected 34 s after the broker was back, everything after the outage in its spool)."""
        if self._stopping or what in self._paced_for:
            self._paced_for.discard(what)
            return False
        wait = self._pacer.delay()
        if wait <= 0:
            return False
        t0 = self._clock()
        await self._sleep(wait)
        self._pacer.waited(self._clock() - t0)
        self._paced_for.add(what)
        return True

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        settings = self.settings
        backoff = settings.reconnect_backoff_ms / 1000.0
        next_attempt = 0.0
        producer: AIOKafkaProducer | None = None
        self._drops_seen = self._memory_dropped + self.spool.dropped_total
        try:
            while True:
                now = self._clock()
                self._check_drops()
                if self._stopping and (producer is None or now >= self._stop_deadline or self._drained()):
                    break
                if producer is None:
                    await self._spool_if_due()
                    if now >= next_attempt and await self._paced("connect"):
                        continue
                    if now >= next_attempt:
                        producer = await self._connecting()
                        if producer is None:
                            next_attempt = self._clock() + backoff
                            backoff = min(backoff * 2, settings.reconnect_backoff_max_ms / 1000.0)
                        continue
                    await self._sleep(min(next_attempt - now, self._spool_poll))
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
                    self.send_errors_total += 1
                    await self._drop_producer(producer)
                    producer = None
                    next_attempt = self._clock() + backoff
                    backoff = min(backoff * 2, settings.reconnect_backoff_max_ms / 1000.0)
                elif outcome == "sent":
                    backoff = settings.reconnect_backoff_ms / 1000.0
        finally:
            await self._shutdown(producer)

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(seconds, 0.0))
        self._wake.clear()

    async def _connecting(self) -> AIOKafkaProducer | None:
        """Connect, spooling meanwhile (a blackholed broker can take ``request_timeout_ms``)."""
        task = asyncio.ensure_future(self._connect())
        while not task.done():
            await asyncio.wait({task}, timeout=POLL_S)
            if task.done():
                break
            if self._stopping and self._clock() >= self._stop_deadline:
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
            self.send_errors_total += 1
            self._connected = False
            await self._close_quietly(producer)
            return None
        except asyncio.CancelledError:
            await self._close_quietly(producer)
            raise
        self._outage_logged = False
        self._down = False
        if not self._connected:
            log.info("connected to Kafka %s (topic %s); %d messages to replay from the spool",
                     self.settings.bootstrap_servers, self.settings.topic, len(self.spool))
        self._connected = True
        self.connects_total += 1
        self._keyframes("connected to Kafka")
        return producer

    def _went_down(self) -> None:
        """Kafka is unreachable: spool from now on, and let the spooled frames start with keyframes."""
        if not self._down:
            self._keyframes("Kafka unreachable")
        self._down = True

    async def _drop_producer(self, producer: AIOKafkaProducer) -> None:
        if self._connected and not self._outage_logged:
            self._outage_logged = True
            log.warning("lost Kafka %s; spooling to %s until it is back", self.settings.bootstrap_servers,
                        self.spool.directory)
        self._connected = False
        self._went_down()
        await self._close_quietly(producer, self.settings.request_timeout_ms / 1000.0)

    @staticmethod
    async def _close_quietly(producer: AIOKafkaProducer, timeout: float = 1.0) -> None:
        try:
            await asyncio.wait_for(producer.stop(), timeout=timeout)
        except (KafkaError, OSError) as exc:  # TimeoutError is an OSError
            log.debug("closing the Kafka producer: %s", exc)

    async def _next_round(self) -> Round | None:
        """The next batch: the spool's head while it holds anything, else what is in memory."""
        if len(self.spool):
            first, msgs = await self._spool_io(self.spool.read, self._batch_n, self._batch_b)
            seqs = list(range(first, first + len(msgs)))
            if self._delivered:
                kept = [(s, m) for s, m in zip(seqs, msgs, strict=True) if s not in self._delivered]
                seqs, msgs = [s for s, _ in kept], [m for _, m in kept]
            if not msgs:
                await self._commit_delivered()
                return None
            in_spool: list[int | None] = list(seqs)
            return Round(msgs, in_spool, from_spool=True)
        with self._mlock:
            msgs = []
            size = 0
            while self._memory and len(msgs) < self._batch_n and size < self._batch_b:
                msg = self._memory.popleft()
                size += msg.size
                msgs.append(msg)
            self._mem_bytes -= size
            if self._memory:
                self._mem_oldest = self._clock()
            self._inflight = len(msgs)
            if not msgs:
                self._idle_waiting = True
        if not msgs:
            return None
        return Round(msgs, None, from_spool=False)

    async def _round(self, producer: AIOKafkaProducer) -> _Outcome:
        """Send one batch and settle it: delivered parts committed, failed parts in the spool."""
        if len(self.spool) and await self._paced("replay"):
            return "idle"  # replaying can wait for the transport's budget; memory overflow still spools
        batch = await self._next_round()
        if batch is None:
            if self._idle_waiting:
                await self._sleep(IDLE_S)
                with self._mlock:
                    self._idle_waiting = False
            return "idle"
        task = asyncio.ensure_future(self._send_all(producer, batch.msgs))
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=POLL_S)
                if task.done():
                    break
                if self._stopping and self._clock() >= self._stop_deadline:
                    await self._abandon(batch)
                    return "abandoned"
                if self._memory_wants_spool():
                    await self._overflow(batch)
            return await self._settle(batch, task.result())
        except BaseException:
            # never lose a batch taken from memory: what is not in the spool goes back to the head of memory
            with self._mlock:
                if not batch.from_spool and self._inflight:
                    rest = batch.msgs[batch.unspooled():]
                    self._memory.extendleft(reversed(rest))
                    self._mem_bytes += sum(m.size for m in rest)
                self._inflight = 0
            raise
        finally:
            if not task.done():
                task.cancel()

    async def _send_all(self, producer: AIOKafkaProducer, msgs: list[Message]) -> list[BaseException | None]:
        """Send a batch; one entry per message: None if acknowledged, else the error.

        Messages are packed into one record batch per partition (more when a batch is full,
        ``max_batch_bytes``), in order, and the batches are queued a wave at a time (first
        batch of every partition, then the second...) so the producer can put all partitions
        in each request. A per-message rejection (a record too large for the broker) is
        resolved by sending that batch's messages one by one.
        """
        topic = self.settings.topic
        results: list[BaseException | None] = [None] * len(msgs)
        try:
            partitions = sorted(await producer.partitions_for(topic))
        except (KafkaError, OSError) as exc:
            return [exc] * len(msgs)
        queues: dict[int, list[tuple[Any, list[int]]]] = {}
        builders: dict[int, tuple[Any, list[int]]] = {}
        for i, msg in enumerate(msgs):
            p = self._partition_of(msg.key, partitions)
            current = builders.get(p)
            if current is None:
                current = builders[p] = (producer.create_batch(), [])
                queues.setdefault(p, []).append(current)
            headers = list(msg.headers)
            if current[0].append(key=msg.key, value=msg.value, timestamp=None, headers=headers) is None:
                current = builders[p] = (producer.create_batch(), [])
                queues[p].append(current)
                if current[0].append(key=msg.key, value=msg.value, timestamp=None, headers=headers) is None:
                    results[i] = RecordTooLargeError(f"{msg.size} bytes do not fit in an empty batch")
                    continue
            current[1].append(i)
        sent: list[tuple[int, list[int], asyncio.Future[Any]]] = []
        error: BaseException | None = None
        for wave in itertools.zip_longest(*queues.values()):
            for p, item in zip(queues, wave, strict=True):
                if item is None or not item[1]:
                    continue
                builder, members = item
                if error is None:
                    try:
                        sent.append((p, members, await producer.send_batch(builder, topic, partition=p)))
                        continue
                    except (KafkaError, OSError) as exc:
                        error = exc
                for i in members:
                    results[i] = error
        outcomes = await asyncio.gather(*(f for _, _, f in sent), return_exceptions=True)
        singly: list[int] = []
        for (_, members, _), outcome in zip(sent, outcomes, strict=True):
            if isinstance(outcome, REJECTED) and len(members) > 1:
                singly += members
            elif isinstance(outcome, BaseException):
                for i in members:
                    results[i] = outcome
        if singly:
            await self._send_singly(producer, msgs, sorted(singly), partitions, results)
        return results

    async def _send_singly(self, producer: AIOKafkaProducer, msgs: list[Message], indices: list[int],
                           partitions: Sequence[int], results: list[BaseException | None]) -> None:
        """Resend messages of rejected batches one per request, to find the one the broker refuses."""
        futures: list[tuple[int, asyncio.Future[Any]]] = []
        for i in indices:
            msg = msgs[i]
            try:
                futures.append((i, await producer.send(self.settings.topic, msg.value, key=msg.key,
                                                       headers=list(msg.headers),
                                                       partition=self._partition_of(msg.key, partitions))))
            except (KafkaError, OSError) as exc:
                results[i] = exc
        outcomes = await asyncio.gather(*(f for _, f in futures), return_exceptions=True)
        for (i, _), outcome in zip(futures, outcomes, strict=True):
            results[i] = outcome if isinstance(outcome, BaseException) else None

    async def _overflow(self, batch: Round) -> None:
        """Memory is over its bound or too old while a batch is in flight: spool, keeping order.

        The part of the batch not yet in the spool goes first (it stays in flight, now with
        sequence numbers), then memory.
        """
        start = batch.unspooled()
        written = await self._to_spool(batch.msgs[start:], give_back_head=False)
        if written is None or batch.from_spool:
            return
        first, n = written
        seqs: list[int | None] = batch.seqs if batch.seqs is not None else [None] * len(batch.msgs)
        for j in range(min(n, len(batch.msgs) - start)):
            seqs[start + j] = first + j
        batch.seqs = seqs

    async def _abandon(self, batch: Round) -> None:
        """Stop deadline reached with a batch in flight: make sure it is in the spool (it may be resent)."""
        log.warning("stop: %d messages still in flight at the deadline; kept in the spool", len(batch.msgs))
        if not batch.from_spool:
            await self._to_spool(batch.msgs[batch.unspooled():])
        with self._mlock:
            self._inflight = 0

    async def _settle(self, batch: Round, results: list[BaseException | None]) -> _Outcome:
        failed: list[Message] = []  # failed and not in the spool
        first_error: BaseException | None = None
        delivered = 0
        not_acked = 0
        seqs = batch.seqs
        for i, (msg, error) in enumerate(zip(batch.msgs, results, strict=True)):
            seq = None if seqs is None else seqs[i]
            if error is None or isinstance(error, REJECTED):
                if error is not None:
                    self.rejected_total += 1
                    self._errors.error("rejected", "Kafka rejected a message for key %r (%s); dropped", msg.key, error)
                else:
                    delivered += 1
                if seq is not None:
                    self._delivered.add(seq)
            else:
                first_error = first_error or error
                not_acked += 1
                if seq is None:
                    failed.append(msg)
        self.sent_total += delivered
        if batch.from_spool:
            self.replayed_total += delivered
            self._replaying = True
        if seqs is not None:
            await self._commit_delivered()
        if failed:
            await self._to_spool(failed)  # older than anything still in memory: they go first
        with self._mlock:
            self._inflight = 0
        if not_acked:
            self._errors.warning("unacked", "%d of %d messages not acknowledged (%s); they wait in the spool",
                                 not_acked, len(batch.msgs), first_error or "error")
            return "failed"
        if self._replaying and not len(self.spool):
            self._replaying = False
            log.info("replay of the spool done")
            self._keyframes("the spool's replay is done")
        return "sent"

    async def _commit_delivered(self) -> None:
        """Commit the spool's head as far as it is delivered; forget seqs the bound dropped."""
        head = self.spool.head_seq
        end = head
        while end in self._delivered:
            end += 1
        if end > head:
            await self._spool_io(self.spool.commit_until, end)
        head = self.spool.head_seq
        self._delivered = {s for s in self._delivered if s >= head}

    async def _shutdown(self, producer: AIOKafkaProducer | None) -> None:
        with self._mlock:
            self._finished = True
        try:
            self._spool_retry_at = 0.0  # the last chance: try the disk even if it failed a moment ago
            await self._spool_memory()
            if self._memory:  # the disk failed: nothing more can be done
                log.error("stop: %d messages could not be spooled and are lost", len(self._memory))
                self._memory_dropped += len(self._memory)
            if producer is not None:
                self._connected = False
                remaining = max(1.0, self._stop_deadline - self._clock())
                try:
                    await asyncio.wait_for(producer.stop(), timeout=remaining)
                except (KafkaError, OSError) as exc:
                    log.warning("stop: closing the Kafka producer: %s", exc)
            await self._spool_io(self.spool.sync)
            if len(self.spool):
                log.info("stop: %d messages (%d bytes) left in the spool %s for the next start",
                         len(self.spool), self.spool.bytes, self.spool.directory)
        finally:
            if self._owns_spool:
                await self._spool_io(self.spool.close)
