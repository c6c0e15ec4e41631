"""The sender's memory: messages submitted and not yet sent or spooled, shared by the sampling threads and the loop.

Why a class of its own: :meth:`~agent.sender.Sender.submit` runs on the sampling thread
and must never wait, so everything it touches sits behind one lock held for microseconds,
and every other access (the loop taking a batch, moving memory to the spool, giving a
failed part back) goes through the same few methods here. It does no I/O and reads no
clock: the caller passes ``now`` (monotonic seconds), so the age rule (``spool_after_ms``)
and the bounds are tested on made-up times (``tests/test_sender_state.py``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from agent.batching import memory_wants_spool
from telemetry.wire import Message

OVERFLOW = 4  # memory holds this many times its bounds (the spool's disk failing) before dropping the oldest


class Memory:
    """A FIFO of messages with bounds, the age of its oldest, and what the loop has taken but not settled."""

    def __init__(self, max_messages: int, max_bytes: int, spool_after_s: float) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.spool_after_s = spool_after_s
        self.lock = threading.Lock()
        self._queue: deque[Message] = deque()
        self.bytes = 0
        self.oldest = 0.0  # when the oldest message came (approximately, after a batch was taken: then)
        self.inflight = 0  # messages taken for a send, until settled
        self.moving = 0  # messages taken for the spool, until written
        self.idle_waiting = False  # the loop found nothing: a submit wakes it
        self.wake_pending = False  # a wake-up is on its way to the loop
        self.finished = False  # the sender stopped: submit spools directly
        self.dropped = 0  # memory_dropped_total

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, msg: Message, now: float, size: int | None = None) -> bool | None:
        """Queue ``msg`` (submitted at ``now``; ``size``: its ``msg.size`` if the caller has it): whether to wake
        the loop; None once finished (spool it directly).

        The loop is woken when memory went over a bound (it spools) or when it waits idle.
        Only when spool writes fail (disk trouble) can memory grow to :data:`OVERFLOW` times
        its bounds; then its oldest are dropped and counted.
        """
        if size is None:
            size = msg.size
        with self.lock:
            if self.finished:
                return None
            if not self._queue:
                self.oldest = now
            self._queue.append(msg)
            self.bytes += size
            over = len(self._queue) > self.max_messages or self.bytes > self.max_bytes
            wake = (over or self.idle_waiting) and not self.wake_pending
            if wake:
                self.wake_pending = True
            while len(self._queue) > OVERFLOW * self.max_messages or self.bytes > OVERFLOW * self.max_bytes:
                self.bytes -= self._queue.popleft().size
                self.dropped += 1
            return wake

    def wants_spool(self, now: float) -> bool:
        """Whether memory goes to the spool now: over a bound, or its oldest waited ``spool_after_s``."""
        with self.lock:
            if not self._queue:
                return False
            return memory_wants_spool(len(self._queue), self.bytes, now - self.oldest, self.max_messages,
                                      self.max_bytes, self.spool_after_s)

    def take_batch(self, max_messages: int, max_bytes: int, now: float) -> list[Message]:
        """The oldest messages for one send (counted in flight); none: the loop is idle and a submit wakes it."""
        with self.lock:
            msgs: list[Message] = []
            size = 0
            while self._queue and len(msgs) < max_messages and size < max_bytes:
                msg = self._queue.popleft()
                size += msg.size
                msgs.append(msg)
            self.bytes -= size
            if self._queue:
                self.oldest = now
            self.inflight = len(msgs)
            if not msgs:
                self.idle_waiting = True
        return msgs

    def end_idle(self) -> None:
        with self.lock:
            self.idle_waiting = False

    def inflight_settled(self) -> None:
        with self.lock:
            self.inflight = 0

    def abort_inflight(self, rest: Sequence[Message]) -> None:
        """A send failed unexpectedly: ``rest`` (its part not in the spool) returns to the head, in order."""
        with self.lock:
            if rest and self.inflight:
                self._queue.extendleft(reversed(rest))
                self.bytes += sum(m.size for m in rest)
            self.inflight = 0

    def take_all(self) -> list[Message]:
        """Everything, counted as moving (so a flush does not see a gap) until :meth:`settled`."""
        with self.lock:
            out = list(self._queue)
            self._queue.clear()
            self.bytes = 0
            self.moving += len(out)
        return out

    def settled(self, moved: int, give_back: Sequence[Message], now: float) -> None:
        """``moved`` messages of :meth:`take_all` are in the spool; ``give_back`` returns to the head."""
        with self.lock:
            self.moving -= moved
            if give_back:
                self._queue.extendleft(reversed(give_back))
                self.bytes += sum(m.size for m in give_back)
                self.oldest = now

    def busy(self) -> bool:
        """Anything waiting, in flight or on its way to the spool."""
        with self.lock:
            return bool(self._queue or self.inflight or self.moving)

    def level(self) -> tuple[int, int]:
        """(messages, bytes) waiting."""
        with self.lock:
            return len(self._queue), self.bytes

    def finish(self) -> None:
        """From now on :meth:`put` refuses (the sender stopped)."""
        with self.lock:
            self.finished = True

    def lose_rest(self) -> int:
        """At stop, what the disk would not take is lost: counted as dropped; how many."""
        with self.lock:
            n = len(self._queue)
            self.dropped += n
        return n
