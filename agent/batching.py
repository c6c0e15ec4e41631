"""The sender's pure parts: what a batch on its way is, when memory goes to the spool, which partition,
what a round's results mean (delivered, rejected, to be spooled) and how far the spool can be committed.

No I/O, no clock of its own and no lock: the sender's loop (:mod:`agent.sender_loop`) holds the
state and passes the time in, so these decisions are tested on plain numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from aiokafka.partitioner import murmur2

from telemetry.wire import Message

# Errors that name the message, not the connection: resending cannot help, so it is dropped.
REJECTED = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError, CorruptRecordException,
            InvalidTimestampError)


@dataclass(slots=True)
class Round:
    """One batch on its way: from the spool, or from memory (``seqs`` None until some of it is spooled too)."""

    msgs: list[Message]
    seqs: list[int | None] | None  # spool sequence number of each message in the spool (None: not in it)
    from_spool: bool

    def unspooled(self) -> int:
        """Index of the first message not in the spool (the spooled ones are always a prefix)."""
        if self.seqs is None:
            return 0
        return next((i for i, s in enumerate(self.seqs) if s is None), len(self.seqs))

    def spooled(self, start: int, first: int, written: int) -> None:
        """Messages from index ``start`` on were appended to the spool as ``first``, ``first + 1``...:
        ``written`` went in (the disk may have taken fewer, or more: memory was appended behind them)."""
        seqs: list[int | None] = self.seqs if self.seqs is not None else [None] * len(self.msgs)
        for j in range(min(written, len(self.msgs) - start)):
            seqs[start + j] = first + j
        self.seqs = seqs


def memory_wants_spool(messages: int, nbytes: int, oldest_age_s: float, max_messages: int, max_bytes: int,
                       spool_after_s: float) -> bool:
    """Whether what waits in memory goes to the spool now: over a bound, or its oldest waited too long."""
    if not messages:
        return False
    return messages > max_messages or nbytes > max_bytes or oldest_age_s > spool_after_s


class PartitionOf:
    """Kafka's default (murmur2) partition for a key, as the Java client and aiokafka pick it.

    Hashes are cached: keys are node names (GPU UUIDs in older agents' spools), and the pure-Python murmur2
    was a quarter of the replay's CPU time.
    """

    def __init__(self, max_keys: int = 4096) -> None:
        self.max_keys = max_keys
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes, partitions: Sequence[int]) -> int:
        h = self._hashes.get(key)
        if h is None:
            if len(self._hashes) > self.max_keys:
                self._hashes.clear()
            h = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return partitions[h % len(partitions)]


@dataclass(slots=True)
class Settlement:
    """What a round's results mean: counted, committed, spooled again or dropped."""

    delivered: int = 0  # acknowledged
    rejected: list[tuple[Message, BaseException]] = field(default_factory=list)  # refused for themselves: dropped
    done_seqs: list[int] = field(default_factory=list)  # spool seqs delivered or rejected: committable
    failed: list[Message] = field(default_factory=list)  # not acknowledged and not in the spool: spool them
    not_acked: int = 0  # not acknowledged, in the spool or not
    first_error: BaseException | None = None


def settle(batch: Round, results: Sequence[BaseException | None]) -> Settlement:
    """Sort a round's per-message results (None: acknowledged) into a :class:`Settlement`."""
    out = Settlement()
    seqs = batch.seqs
    for i, (msg, error) in enumerate(zip(batch.msgs, results, strict=True)):
        seq = None if seqs is None else seqs[i]
        if error is None or isinstance(error, REJECTED):
            if error is not None:
                out.rejected.append((msg, error))
            else:
                out.delivered += 1
            if seq is not None:
                out.done_seqs.append(seq)
        else:
            out.first_error = out.first_error or error
            out.not_acked += 1
            if seq is None:
                out.failed.append(msg)
    return out


def commit_end(head: int, delivered: Collection[int]) -> int:
    """The spool's sequence number up to which (exclusive) everything from ``head`` on is delivered."""
    end = head
    while end in delivered:
        end += 1
    return end
