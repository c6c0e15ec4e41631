"""The ``api_secrets`` table: keys the API's replicas share (the opaque-id key).

Why in the store: it is the one way into the database. A secret is made once per
database: the first replica to ask stores its candidate, every later one reads that.
Secrets are never logged.
"""

from __future__ import annotations

from typing import Any


async def get_or_create(db: Any, name: str, candidate: bytes) -> bytes:
    """The secret called ``name``, storing ``candidate`` as it when there is none yet."""
    await db.execute("INSERT INTO api_secrets (name, secret) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                     name, candidate)
    return bytes(await db.fetchval("SELECT secret FROM api_secrets WHERE name = $1", name))
