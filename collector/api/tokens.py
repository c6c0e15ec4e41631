"""Bearer tokens: made, hashed, looked up and revoked.

Why hashed: the ``api_tokens`` table keeps only SHA-256 of each token, so the token is
shown once (to whoever created it) and a leaked dump or backup cannot call the API.
A token is ``gw_`` followed by 32 random bytes in URL-safe base64; 256 bits of entropy
make a salted slow hash unnecessary. Tokens never reach a log line: only their id,
name and a short prefix are ever printed.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

Role = Literal["viewer", "operator", "admin"]
ROLES: Final[tuple[Role, ...]] = ("viewer", "operator", "admin")
RANK: Final[dict[str, int]] = {r: i for i, r in enumerate(ROLES)}
PREFIX: Final = "gw_"
_NAMESPACE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


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


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def check_namespaces(namespaces: Sequence[str] | None) -> tuple[str, ...] | None:
    """Validate Kubernetes namespace names (DNS labels); None means the whole fleet."""
    if namespaces is None:
        return None
    out = tuple(dict.fromkeys(n.strip() for n in namespaces if n.strip()))
    if not out:
        raise ValueError("namespaces: give at least one namespace, or none at all for the whole fleet")
    bad = [n for n in out if not _NAMESPACE_RE.match(n)]
    if bad:
        raise ValueError(f"namespaces: not valid Kubernetes namespace names: {bad}")
    return out


def _info(row: Any) -> TokenInfo:
    ns = row["namespaces"]
    return TokenInfo(
        id=int(row["id"]), name=str(row["name"]), prefix=str(row["prefix"]), role=row["role"],
        namespaces=tuple(ns) if ns is not None else None, created_at=row["created_at"],
        last_used_at=row["last_used_at"], revoked_at=row["revoked_at"],
    )


_COLUMNS: Final = "id, name, prefix, role, namespaces, created_at, last_used_at, revoked_at"


async def create(db: Any, role: str, namespaces: Sequence[str] | None, name: str = "") -> tuple[str, TokenInfo]:
    """Store a new token; returns the token (to show once) and its stored description."""
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}")
    scope = check_namespaces(namespaces)
    token = new_token()
    row = await db.fetchrow(
        f"INSERT INTO api_tokens (name, prefix, token_sha256, role, namespaces) VALUES ($1, $2, $3, $4, $5) "
        f"RETURNING {_COLUMNS}",
        name, token[len(PREFIX):len(PREFIX) + 6], digest(token), role, list(scope) if scope is not None else None,
    )
    return token, _info(row)


async def lookup(db: Any, token: str) -> TokenInfo | None:
    """The live (not revoked) token with this secret, marking it used; None if there is none."""
    row = await db.fetchrow(
        f"UPDATE api_tokens SET last_used_at = now() WHERE token_sha256 = $1 AND revoked_at IS NULL "
        f"RETURNING {_COLUMNS}",
        digest(token),
    )
    return _info(row) if row is not None else None


async def list_tokens(db: Any) -> list[TokenInfo]:
    return [_info(r) for r in await db.fetch(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY id")]


async def revoke(db: Any, token_id: int) -> TokenInfo | None:
    row = await db.fetchrow(
        f"UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING {_COLUMNS}",
        token_id,
    )
    return _info(row) if row is not None else None
