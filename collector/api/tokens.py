"""Bearer tokens: made, hashed, looked up and revoked.

Why hashed: the ``api_tokens`` table (rows kept by :mod:`collector.store.tokens`) keeps
only SHA-256 of each token, so the token is shown once (to whoever created it) and a
leaked dump or backup cannot call the API.
A token is ``gw_`` followed by 32 random bytes in URL-safe base64; 256 bits of entropy
make a salted slow hash unnecessary. Tokens never reach a log line: only their id,
name and a short prefix are ever printed.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from typing import Any, Final

from collector.store import tokens as store_tokens
from collector.store.tokens import Role, TokenInfo, list_tokens, revoke

ROLES: Final[tuple[Role, ...]] = ("viewer", "operator", "admin")
RANK: Final[dict[str, int]] = {r: i for i, r in enumerate(ROLES)}
PREFIX: Final = "gw_"
_NAMESPACE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


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


async def create(db: Any, role: str, namespaces: Sequence[str] | None, name: str = "") -> tuple[str, TokenInfo]:
    """Store a new token; returns the token (to show once) and its stored description."""
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}")
    scope = check_namespaces(namespaces)
    token = new_token()
    info = await store_tokens.insert(db, name, token[len(PREFIX):len(PREFIX) + 6], digest(token),
                                     ROLES[RANK[role]], scope)
    return token, info


async def lookup(db: Any, token: str) -> TokenInfo | None:
    """The live (not revoked) token with this secret, marking it used; None if there is none."""
    return await store_tokens.use(db, digest(token))


__all__ = ["PREFIX", "RANK", "ROLES", "Role", "TokenInfo", "check_namespaces", "create", "digest", "list_tokens",
           "lookup", "new_token", "revoke"]
