"""Opaque ids for anomalies, alerts and silences (and the cursors that page through them).

Why: their row ids are numbered across all namespaces, so a namespace-scoped token that
saw ids 41 and 57 would know that 15 rows of other namespaces lie between. The API
shows instead a keyed permutation of the row id: a 128-bit block (64 zero bits, then
the id) enciphered by a six-round Feistel network whose round function is HMAC-SHA256
under a random key kept in the database (``api_secrets``, so every replica agrees),
tweaked by the kind of row. Without the key the ids are indistinguishable from random
strings; with it the API maps them back, and the 64 zero bits reject forged or mistyped
ids (a random string passes with probability 2^-64). Ids are stable (a silence's id
does not change between calls), and say nothing of order or count.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Any, Final, Literal

from collector.store import api_secrets

Kind = Literal["anomaly", "alert", "silence"]
_PREFIX: Final[dict[Kind, str]] = {"anomaly": "an_", "alert": "al_", "silence": "si_"}
_ROUNDS: Final = 6
_HALF: Final = 8
KEY_NAME: Final = "opaque_ids"


class IdCodec:
    """Row id <-> opaque id, under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the opaque id key must be at least 16 bytes")
        self._key = key

    def _round(self, kind: Kind, n: int, half: bytes) -> bytes:
        msg = kind.encode() + bytes([n]) + half
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:_HALF]

    def encode(self, kind: Kind, row_id: int) -> str:
        left, right = bytes(_HALF), row_id.to_bytes(_HALF, "big")
        for n in range(_ROUNDS):
            left, right = right, bytes(a ^ b for a, b in zip(left, self._round(kind, n, right), strict=True))
        return _PREFIX[kind] + base64.urlsafe_b64encode(left + right).decode().rstrip("=")

    def decode(self, kind: Kind, text: str) -> int | None:
        """The row id behind ``text``, or None when it is not an id of this kind made with this key."""
        prefix = _PREFIX[kind]
        if not text.startswith(prefix) or len(text) != len(prefix) + 22:
            return None
        try:
            block = base64.urlsafe_b64decode(text[len(prefix):] + "==")
        except (binascii.Error, ValueError):
            return None
        if len(block) != 2 * _HALF:
            return None
        left, right = block[:_HALF], block[_HALF:]
        for n in reversed(range(_ROUNDS)):
            left, right = bytes(a ^ b for a, b in zip(right, self._round(kind, n, left), strict=True)), left
        if left != bytes(_HALF):
            return None
        row_id = int.from_bytes(right, "big")
        return row_id if 0 < row_id < 2**63 else None


async def load(db: Any) -> IdCodec:
    """The codec under the database's key, creating the key on first use (one per database)."""
    return IdCodec(await api_secrets.get_or_create(db, KEY_NAME, secrets.token_bytes(32)))
