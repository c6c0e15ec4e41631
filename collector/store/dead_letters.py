"""The ``dead_letters`` table: dead letters that not even the dead-letter topic took.

Why in the store: it is the one way into the database. :mod:`collector.deadletter`
decides what a row keeps (cut to size, hashed); this module stores it, one row per
source offset, so a re-read adds nothing.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, Final

_INSERT: Final = """
INSERT INTO dead_letters (topic, partition, "offset", reason, why_not_kafka, size, sha256, key, headers, value)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10)
ON CONFLICT (topic, partition, "offset") DO NOTHING
"""


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """One row of ``dead_letters``: where the message came from, why it is here, what is kept."""

    topic: str
    partition: int
    offset: int
    reason: str
    why_not_kafka: str
    size: int
    sha256: str
    key: bytes
    headers_json: str
    value: bytes


async def insert(db: Any, row: DeadLetterRow) -> None:
    """Store ``row`` unless its source offset is stored already (``db``: a pool or connection)."""
    await db.execute(_INSERT, *astuple(row))
