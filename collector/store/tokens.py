"""The ``api_tokens`` table: rows of bearer tokens, stored by their SHA-256 only.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
The API makes tokens and checks scopes (:mod:`collector.api.tokens`); this module keeps
their rows: insert, find a live one by digest (marking it used), list and revoke.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

Role = Literal["viewer", "operator", "admin"]


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A stored token without its secret."""

    id: int
    name: str
    prefix: str
    role: Role
    namespaces: tuple[str, ...] | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def _info(row: Any) -> TokenInfo:
    ns = row["namespaces"]
    return TokenInfo(
        id=int(row["id"]), name=str(row["name"]), prefix=str(row["prefix"]), role=row["role"],
        namespaces=tuple(ns) if ns is not None else None, created_at=row["created_at"],
        last_used_at=row["last_used_at"], revoked_at=row["revoked_at"],
    )


_COLUMNS: Final = "id, name, prefix, role, namespaces, created_at, last_used_at, revoked_at"


async def insert(db: Any, name: str, prefix: str, sha256: bytes, role: Role,
                 namespaces: tuple[str, ...] | None) -> TokenInfo:
    """Store a token's row (``db``: a pool or connection)."""
    row = await db.fetchrow(
        f"INSERT INTO api_tokens (name, prefix, token_sha256, role, namespaces) VALUES ($1, $2, $3, $4, $5) "
        f"RETURNING {_COLUMNS}",
        name, prefix, sha256, role, list(namespaces) if namespaces is not None else None,
    )
    return _info(row)


async def use(db: Any, sha256: bytes) -> TokenInfo | None:
    """The live (not revoked) token with this digest, marking it used; None if there is none."""
    row = await db.fetchrow(
        f"UPDATE api_tokens SET last_used_at = now() WHERE token_sha256 = $1 AND revoked_at IS NULL "
        f"RETURNING {_COLUMNS}",
        sha256,
    )
    return _info(row) if row is not None else None


async def list_tokens(db: Any) -> list[TokenInfo]:
    """Every token, oldest first."""
    return [_info(r) for r in await db.fetch(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY id")]


async def revoke(db: Any, token_id: int) -> TokenInfo | None:
    """Revoke a token (revoking twice keeps the first time); None when no token has this id."""
    row = await db.fetchrow(
        f"UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING {_COLUMNS}",
        token_id,
    )
    return _info(row) if row is not None else None
