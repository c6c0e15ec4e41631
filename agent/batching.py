"""The sender's pure parts: what a batch on its way is, when memory goes to the spool, which partition.

No I/O, no clock of its own and no lock: :class:`~agent.sender.Sender` (the loop) holds the
state and passes the time in, so these decisions are tested on plain numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka.partitioner import murmur2

from telemetry.wire import Message


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


def memory_wants_spool(messages: int, nbytes: int, oldest_age_s: float, max_messages: int, max_bytes: int,
                       spool_after_s: float) -> bool:
    """Whether what waits in memory goes to the spool now: over a bound, or its oldest waited too long."""
    if not messages:
        return False
    return messages > max_messages or nbytes > max_bytes or oldest_age_s > spool_after_s


class PartitionOf:
    """Kafka's default (murmur2) partition for a key, as the Java client and aiokafka pick it.

    Hashes are cached: keys are GPU UUIDs, a handful per node, and the pure-Python murmur2
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
