"""Dead letters that always fit somewhere: the message as it came, cut to fit, or a database row.

Why: a message the collector cannot store must be set aside and its partition must move
on. A 5 MiB message, though, does not fit the dead-letter producer's request limit (1 MiB
by default), and a broker may refuse or time out the produce; had that exception ended the
consumer loop, every restart would meet the same message (a crash loop). So:

* :func:`fit` returns the dead letter as a Kafka message within ``max_request_size``: the
  original key (cut to 1 KiB), headers (each value cut to 1 KiB) and value when they fit,
  else the value cut to what fits, with headers naming the original size, its SHA-256,
  the source (topic/partition/offset) and the reason;
* :func:`record` stores a dead letter in the ``dead_letters`` table (through
  :mod:`collector.store.dead_letters`) when even that could
  not be produced (the first MiB of the value, its size and hash, why Kafka refused it).
  One row per source offset, so a re-read adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from collector.store import dead_letters

KEY_MAX: Final = 1024
HEADER_VALUE_MAX: Final = 1024
HEADERS_MAX: Final = 32
#: bytes left for a produce request's framing (request header, record batch, record)
SLACK: Final = 16 * 1024
#: how much of a message's value a database dead letter keeps
DB_VALUE_MAX: Final = 1 << 20

@dataclass(frozen=True, slots=True)
class DeadLetterMessage:
    """What goes to the dead-letter topic for one message."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    truncated: bool


def _size(headers: list[tuple[str, bytes]]) -> int:
    return sum(len(name.encode("utf-8", "replace")) + len(value) + 8 for name, value in headers)


def fit(key: bytes, value: bytes, headers: tuple[tuple[str, bytes], ...], reason: str, source: str,
        max_request_size: int) -> DeadLetterMessage:
    """The dead letter of a message (``source``: topic/partition/offset) within ``max_request_size`` bytes."""
    own = [("dlq_reason", reason.encode("utf-8", "replace")[:1000]), ("dlq_source", source.encode()[:512]),
           ("dlq_size", str(len(value)).encode()), ("dlq_sha256", hashlib.sha256(value).hexdigest().encode())]
    kept = [(name[:256], v[:HEADER_VALUE_MAX]) for name, v in headers[:HEADERS_MAX] if not name.startswith("dlq_")]
    out_key = key[:KEY_MAX]
    out_headers = kept + own
    room = max_request_size - SLACK - len(out_key) - _size(out_headers)
    if len(value) <= room:
        return DeadLetterMessage(out_key, value, out_headers, False)
    out_headers = [*own, ("dlq_truncated", b"1")]  # the original headers give way first
    room = max(0, max_request_size - SLACK - len(out_key) - _size(out_headers))
    return DeadLetterMessage(out_key, value[:room], out_headers, True)


async def record(db: Any, topic: str, partition: int, offset: int, key: bytes, value: bytes,
                 headers: tuple[tuple[str, bytes], ...], reason: str, why_not_kafka: str) -> None:
    """Store one dead letter in ``dead_letters`` (``db``: an asyncpg pool or connection)."""
    listed = [[name, v[:HEADER_VALUE_MAX].decode("utf-8", "backslashreplace")] for name, v in headers[:HEADERS_MAX]]
    await dead_letters.insert(db, dead_letters.DeadLetterRow(
        topic, partition, offset, reason[:2000], why_not_kafka[:2000], len(value),
        hashlib.sha256(value).hexdigest(), key[:KEY_MAX], json.dumps(listed), value[:DB_VALUE_MAX],
    ))
