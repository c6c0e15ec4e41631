"""The caller as the API sees it (role, namespace scope) and the short-lived cache of them.

Why apart from :mod:`collector.api.auth`: query modules take a :class:`Principal` to
filter by scope, without depending on FastAPI.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from collector.api.tokens import Role


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: int
    name: str
    role: Role
    namespaces: tuple[str, ...] | None  # None: the whole fleet

    @property
    def scoped(self) -> bool:
        return self.namespaces is not None

    def scope_param(self) -> list[str] | None:
        """The scope as a ``text[]`` bind parameter (None when unscoped)."""
        return list(self.namespaces) if self.namespaces is not None else None

    def sees_namespace(self, namespace: str | None) -> bool:
        return self.namespaces is None or (namespace is not None and namespace in self.namespaces)


class TokenCache:
    """Checked tokens by hash, for ``ttl`` seconds."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[bytes, tuple[float, Principal]] = {}

    def get(self, key: bytes) -> Principal | None:
        hit = self._entries.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: bytes, principal: Principal) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self.ttl, principal)

    def clear(self) -> None:
        self._entries.clear()
