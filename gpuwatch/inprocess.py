"""The in-process transport of ``gpuwatch up``: the agent's messages straight into the collector.

It stands where Kafka stands in a cluster, with the same interface on each side: the
agent's threads call :meth:`InProcessTransport.submit` (thread-safe, never blocks), and
the collector reads batches of :class:`~collector.ingest.Inbound` with consecutive
offsets on one partition. Nothing is persisted: ``up`` is one process on one machine, and
its shutdown drains the queue into the database before it exits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from collector.ingest import Inbound
from telemetry.wire import Message


class InProcessTransport:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        self._offset = 0
        self.submitted = 0

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

    async def batch(self, max_records: int = 2000, max_wait: float = 0.2) -> list[Inbound]:
        """Wait up to ``max_wait`` for the first message, then take what is queued (up to a cap)."""
        if not self._queue.empty():
            # what is queued is taken at once: wait_for with a zero timeout cancels get()
            # before it runs, so drain() would never see an item
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

    async def drain(self, max_records: int = 2000) -> AsyncIterator[list[Inbound]]:
        """What is still queued, in batches (shutdown)."""
        while not self._queue.empty():
            yield await self.batch(max_records, 0)
