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
* **Per-GPU order.** Messages are keyed by the node (Kafka's murmur2 partitioner puts a
  node, and so each of its GPUs, on one partition). The spool is one FIFO, and while it holds anything every new
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
* **Its clock passed in.** Every time the sender decides by (memory's age, backoffs, the
  stop deadline, budget waits) is read from ``clock``, so tests run those decisions on fake
  time. The parts: :mod:`agent.sender_memory` (memory, shared with the submitting threads),
  :mod:`agent.sender_state` (backoffs, deadline, budget waits, keyframe requests, counts),
  :mod:`agent.batching` (a round and its results), :mod:`agent.sender_spool` (the spool on
  its worker thread), :mod:`agent.kafka_io` (aiokafka) and :mod:`agent.sender_loop` (the loop);
  this module is the face the agent's threads see.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agent import kafka_io
from agent.cpuclock import TRANSPORT, ThreadCpu
from agent.kafka_settings import KafkaSettings
from agent.scheduler import CpuPacer
from agent.sender_loop import DeliveryLoop
from agent.sender_memory import Memory
from agent.sender_spool import SpoolSide
from agent.sender_state import BudgetGate, Clock, SenderStats, Tally
from agent.spool import Spool, SpoolStats
from agent.stats import as_dict
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

__all__ = ["Message", "Sender", "SenderStats"]

log = logging.getLogger(__name__)
KeyframeNeeded = Callable[[str], None]


class Sender:
    """Delivers :class:`Message` to Kafka in order per key, spooling to disk whenever it cannot.

    Thread mode (default): :meth:`start` runs an event loop in a daemon thread. Loop mode
    (``loop=`` given): the sender runs as a task on that loop; use :meth:`aflush` and
    :meth:`astop` from inside it (the blocking :meth:`flush`/:meth:`stop` would deadlock).
    ``clock`` (monotonic seconds) is where every time the sender decides by comes from.
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
        clock: Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock  # monotonic seconds: memory age, backoffs, budget waits, the stop deadline
        self._owns_spool = not isinstance(spool, Spool)
        self.spool = spool if isinstance(spool, Spool) else Spool(spool)
        # a message must fit in a request and in the spool (an entry may take half its bound; 1 KiB for framing)
        self._max_message = min(settings.max_request_bytes, self.spool.max_bytes // 2 - 1024)
        self._given_loop = loop
        self.on_keyframe_needed = on_keyframe_needed
        self._cpu = cpu or ThreadCpu()
        self._pacer = CpuPacer(transport_cpu_budget, cpu_clock=lambda: self._cpu.seconds(TRANSPORT),
                               wall_clock=clock)
        self._errors = RateLimitedLog(log, clock=clock)
        self._memory = Memory(memory_max_messages, memory_max_bytes, spool_after_ms / 1000.0)
        self._tally = Tally()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuwatch-spool",
                                      initializer=self._cpu.register, initargs=(TRANSPORT,))
        side = SpoolSide(self.spool, self._memory, self._io, self._tally, self._errors, clock)
        self._run = DeliveryLoop(settings, side, batch_messages=replay_batch_messages,
                                 batch_bytes=replay_batch_bytes, spool_poll_s=spool_poll_ms / 1000.0,
                                 gate=BudgetGate(self._pacer), keyframes=self._keyframes, errors=self._errors,
                                 clock=clock, close_spool=self._owns_spool)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._done: Future[None] | None = None
        self._started = False

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start delivering (returns at once; the first connection is made in the background)."""
        if self._started:
            raise RuntimeError("Sender already started")
        self._started = True
        if self._given_loop is not None:
            self._loop = self._given_loop
            self._done = asyncio.run_coroutine_threadsafe(self._run.main(), self._given_loop)
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
                    runner.run(self._run.main())
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
        wake = self._memory.put(msg, self._clock(), size)
        if wake is None:
            self._submit_late(msg)
        elif wake and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop just closed: stop() spools what is left
                self._loop.call_soon_threadsafe(self._run.wake)
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is acknowledged by Kafka; False on timeout."""
        deadline = self._clock() + timeout
        while not self._run.drained():
            if self._clock() >= deadline:
                return False
            time.sleep(0.01)
        return True

    async def aflush(self, timeout: float = 10.0) -> bool:
        """:meth:`flush` for callers on the sender's own loop."""
        deadline = self._clock() + timeout
        while not self._run.drained():
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
        memory, memory_bytes = self._memory.level()
        t = self._tally
        return SenderStats(
            sent_total=t.sent, spooled_total=t.spooled, replayed_total=t.replayed,
            send_errors_total=t.send_errors, rejected_total=t.rejected,
            memory_dropped_total=self._memory.dropped, memory_messages=memory, memory_bytes=memory_bytes,
            connected=int(self._run.connected), connects_total=t.connects,
            paced_seconds_total=self._pacer.waited_s, cpu_budget_ratio=self._pacer.fraction,
        ), self.spool.stats()

    def stats(self) -> dict[str, int | float]:
        """:meth:`snapshots` as one dict, for logs, benchmarks and tests."""
        return as_dict(*self.snapshots())

    @property
    def connected(self) -> bool:
        return self._run.connected

    # ------------------------------------------------------------------ helpers

    def _keyframes(self, why: str) -> None:
        """Ask for a keyframe of every GPU (see the module docstring for when)."""
        if self.on_keyframe_needed is not None:
            self.on_keyframe_needed(why)

    def _request_stop(self, timeout: float) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._run.request_stop, timeout)

    def _memory_wants_spool(self) -> bool:
        """Whether memory goes to the spool now (over a bound, or its oldest waited ``spool_after_ms``)."""
        return self._memory.wants_spool(self._clock())

    async def _send_all(self, producer: Any, msgs: list[Message]) -> list[BaseException | None]:
        """One round sent as the loop sends it (:func:`agent.kafka_io.send_all`), for tests with a fake producer."""
        return await kafka_io.send_all(producer, self.settings.topic, msgs, self._run.partition_of)

    def _submit_late(self, msg: Message) -> None:
        try:
            self.spool.append([msg])
            self._tally.spooled += 1
        except (OSError, RuntimeError) as exc:
            self._memory.dropped += 1
            self._errors.error("late", "message submitted after the sender stopped could not be spooled (%s); "
                               "dropped", exc)

    def _finish_unstarted(self) -> None:
        self._memory.finish()
        leftovers = self._memory.take_all()
        if leftovers:
            self.spool.append(leftovers)
            self._tally.spooled += len(leftovers)
        self._memory.settled(len(leftovers), (), self._clock())
        self._shutdown_io(wait=True)
        if self._owns_spool:
            self.spool.close()
