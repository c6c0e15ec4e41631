"""Databases on a server: the one ``gpuwatch up`` keeps in its embedded PostgreSQL.

Why in the store: it is the only way into the database, also for the admin connection.
"""

from __future__ import annotations

import asyncpg


async def ensure_database(admin_dsn: str, name: str) -> None:
    """Create database ``name`` on the server of ``admin_dsn`` unless it exists.

    ``name`` must be a constant of the caller (it is an identifier, not a bind parameter).
    """
    conn = await asyncpg.connect(admin_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
