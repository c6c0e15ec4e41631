"""The sender's side of its on-disk spool: memory written behind the spool in order, rounds read from its head.

Why apart from the loop (:mod:`agent.sender_loop`): every spool call runs on one worker
thread (an fsync never stalls the loop), a disk that refuses writes (full) is tried again
only after a backoff (1 s doubling to 30 s) instead of five times a second, and what the
disk did not take goes back to the head of memory so a later attempt keeps each GPU's
order. Those rules are the same whether the loop is connected or not, so they live here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agent.batching import Round, commit_end
from agent.sender_memory import Memory
from agent.sender_state import SPOOL_RETRY_S, Backoff, Clock, Tally
from agent.spool import Spool, SpoolWriteError
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

log = logging.getLogger("agent.sender")  # the sender's modules log under one name, as before the split
T = TypeVar("T")


class SpoolSide:
    """Writes to and reads from the :class:`~agent.spool.Spool` for the sender's loop, on its worker thread."""

    def __init__(self, spool: Spool, memory: Memory, io: ThreadPoolExecutor, tally: Tally,
                 errors: RateLimitedLog, clock: Clock) -> None:
        self.spool = spool
        self.memory = memory
        self.io = io
        self.tally = tally
        self._errors = errors
        self._clock = clock
        self.retry = Backoff(*SPOOL_RETRY_S)  # after a failed write: no write until retry.until
        self.delivered: set[int] = set()  # spool seqs delivered but not yet committed

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the spool's worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.io, fn, *args)

    async def append(self, msgs: list[Message]) -> tuple[int, int]:
        """Append on the worker thread: (first seq, how many went in; the rest did not)."""
        try:
            first = await self.call(self.spool.append, msgs)
            written = len(msgs)
        except SpoolWriteError as exc:
            first, written = exc.first, exc.written
            wait = self.retry.failed(self._clock())
            waiting = self.memory.level()[0] + len(msgs) - written
            self._errors.error("spool", "spool write failed (%s): %d of %d messages spooled, %d wait in memory; "
                               "next spool write in %.0f s", exc.cause, written, len(msgs), waiting, wait)
        else:
            if self.retry.succeeded():
                self._errors.resolved("spool", "spool writes succeed again")
        self.tally.spooled += written
        return first, written

    def blocked(self) -> bool:
        """A spool write failed a moment ago: do not try again yet (memory holds the messages)."""
        return not self.retry.due(self._clock())

    async def to_spool(self, head: Sequence[Message] = (), *, give_back_head: bool = True) -> tuple[int, int] | None:
        """Append ``head`` then everything in memory, in that order: (first seq, how many went in), None if none.

        What the disk did not take goes back to the head of memory (``head`` too if
        ``give_back_head``), so a later attempt keeps the order.
        """
        if self.blocked():
            if head and give_back_head:
                self.memory.settled(0, head, self._clock())
            return None
        behind = self.memory.take_all()
        msgs = [*head, *behind]
        written = 0
        first = 0
        try:
            if msgs:
                first, written = await self.append(msgs)
        finally:
            back: Sequence[Message] = ()
            if written < len(msgs):
                back = msgs[written:] if give_back_head else behind[max(0, written - len(head)):]
            self.memory.settled(len(behind), back, self._clock())
        return (first, written) if written else None

    async def read_round(self, max_messages: int, max_bytes: int) -> Round | None:
        """The spool's head as a round, less what is delivered and not yet committed; None if that is all."""
        first, msgs = await self.call(self.spool.read, max_messages, max_bytes)
        seqs = list(range(first, first + len(msgs)))
        if self.delivered:
            kept = [(s, m) for s, m in zip(seqs, msgs, strict=True) if s not in self.delivered]
            seqs, msgs = [s for s, _ in kept], [m for _, m in kept]
        if not msgs:
            await self.commit_delivered()
            return None
        in_spool: list[int | None] = list(seqs)
        return Round(msgs, in_spool, from_spool=True)

    async def commit_delivered(self) -> None:
        """Commit the spool's head as far as it is delivered; forget seqs the bound dropped."""
        head = self.spool.head_seq
        end = commit_end(head, self.delivered)
        if end > head:
            await self.call(self.spool.commit_until, end)
        head = self.spool.head_seq
        self.delivered = {s for s in self.delivered if s >= head}
