"""The in-process transport of ``gpuwatch up``: the agent's messages straight into the collector.

It stands where Kafka stands in a cluster and fills both seams: on the agent side it is a
producer (:class:`~agent.producer.Producer`: the agent's threads call
:meth:`InProcessTransport.submit`, thread-safe, never blocking), on the collector side a
:class:`~collector.source.Source` of batches of :class:`~collector.ingest.Inbound` with
consecutive offsets on one partition, read by the same consume loop as Kafka's. Nothing is
persisted: ``up`` is one process on one machine, and at shutdown the source hands over
what is still queued, so the loop drains it into the database before it finishes.
:class:`InProcessReplies` is the way back: a keyframe request reaches the agent's framer at
once, a profile request its profiler (which queues it); a dead letter is logged and counted
by the ingestor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from agent.framing import Framer
from agent.profiling import Profiler
from collector.ingest import Inbound
from telemetry.control import KeyframeRequest, ProfileRequest
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

log = logging.getLogger("gpuwatch.up")

MAX_RECORDS = 2000
MAX_WAIT_S = 0.2


class InProcessTransport:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        self._offset = 0
        self._closed = False
        self._limited = RateLimitedLog(log)
        self.submitted = 0

    # ---- the agent's side ----
    def submit(self, msg: Message) -> None:
        """From any thread: hand a message to the collector's loop."""
        self.submitted += 1
        self.loop.call_soon_threadsafe(self._queue.put_nowait, msg)

    def pending(self) -> int:
        return self._queue.qsize()

    def _inbound(self, msg: Message) -> Inbound:
        inbound = Inbound(0, self._offset, msg.key, msg.value, msg.headers)
        self._offset += 1
        return inbound

    async def batch(self, max_records: int = MAX_RECORDS, max_wait: float = MAX_WAIT_S) -> list[Inbound]:
        """Wait up to ``max_wait`` for the first message, then take what is queued (up to a cap)."""
        if not self._queue.empty():
            # what is queued is taken at once: wait_for with a zero timeout cancels get()
            # before it runs, so a drain would never see an item
            first = self._queue.get_nowait()
        else:
            try:
                first = await asyncio.wait_for(self._queue.get(), max_wait)
            except TimeoutError:
                return []
        out = [self._inbound(first)]
        while len(out) < max_records and not self._queue.empty():
            out.append(self._inbound(self._queue.get_nowait()))
        return out

    # ---- the collector's side: a Source ----
    async def start(self) -> None:
        """Nothing to connect."""

    async def fetch(self) -> list[Inbound] | None:
        if not self._closed:
            return await self.batch()
        return await self.batch(MAX_RECORDS, 0) if not self._queue.empty() else None

    def holding(self) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    async def stored(self, batch: Sequence[Inbound]) -> None:
        """Nothing to commit: the queue forgets what it handed over."""

    def give_up(self) -> str | None:
        return None  # no other reader: a batch is retried until the database takes it (or a second signal)

    def abandoned(self, partitions: set[int]) -> None:
        raise AssertionError("the in-process source never gives a batch up")

    async def database_away(self, exc: BaseException, delay: float) -> None:
        self._limited.warning("db", "database unavailable (%s: %s); retrying in %.1fs", type(exc).__name__, exc,
                              delay)
        await asyncio.sleep(delay)

    def database_back(self) -> None:
        self._limited.resolved("db", "database reachable again")

    async def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the loop to take what is queued."""
        await asyncio.sleep(0)  # let call_soon_threadsafe deliveries land in the queue
        deadline = self.loop.time() + timeout
        while not self._queue.empty() and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        return self._queue.empty()

    async def shutdown(self, timeout: float) -> None:
        """Fetch what is queued, then finish (the loop stores it first)."""
        await asyncio.sleep(0)  # let call_soon_threadsafe deliveries land in the queue
        self._closed = True


class InProcessReplies:
    """Keyframe requests to the framers of this process, profile requests to its profilers;
    dead letters are logged."""

    def __init__(self, framers: Sequence[Framer], profilers: Sequence[Profiler] = ()) -> None:
        self.framers = framers
        self.profilers = profilers

    async def dead_letter(self, msg: Inbound, reason: str) -> None:
        log.warning("dead-lettered message %d: %s", msg.offset, reason)

    async def request_keyframe(self, request: KeyframeRequest) -> None:
        """The collector lost a stream's base: the agent in this process answers at once."""
        for framer in self.framers:
            if request.matches(framer.node, framer.instance):
                framer.request_keyframe(request.gpu)

    async def request_profile(self, request: ProfileRequest) -> None:
        """A throughput drop opened: the agent in this process profiles the GPU (it says if it may not)."""
        for profiler in self.profilers:
            profiler.request(request)  # each keeps the requests for its own node and instance
