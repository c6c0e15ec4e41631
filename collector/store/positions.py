"""Persisted resume offsets of the Kafka consumer (table ``ingest_positions``), in the store
as every way into the database is.

Saved after each stored batch, once its Kafka commit succeeded: a crash between the two
leaves a resume offset that is only older than it could be, which costs a re-read, never
data. (Saved before the commit, a resume offset could be too new for the committed offset
that a restart re-reads from: a delta frame between the two whose keyframe lies before the
new resume offset would then be undecodable, and dead-lettered although valid.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_LOAD = "SELECT partition, resume_offset FROM ingest_positions WHERE topic = $1"
_SAVE = """
INSERT INTO ingest_positions (topic, partition, resume_offset, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (topic, partition) DO UPDATE SET resume_offset = EXCLUDED.resume_offset, updated_at = now()
"""


async def load(pool: Any, topic: str) -> dict[int, int]:
    rows = await pool.fetch(_LOAD, topic)
    return {int(r["partition"]): int(r["resume_offset"]) for r in rows}


async def save(pool: Any, topic: str, offsets: Mapping[int, int]) -> None:
    if offsets:
        await pool.executemany(_SAVE, [(topic, p, o) for p, o in sorted(offsets.items())])
