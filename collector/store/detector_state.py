"""The ``detector_state`` table: each node's detector state, saved with the anomalies it holds.

Why in the store: it is the collector's one way into the database. The detection service
decides when a node is saved (collector/alerting/service.py) and what the bytes are
(collector/detect/checkpoint.py); these functions say how, with parameterised statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

_SAVE: Final = (
    "INSERT INTO detector_state (node, shape, last_ts, state, saved_at) "
    "SELECT n, s, t, b, now() FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bytea[]) AS u(n, s, t, b) "
    "ON CONFLICT (node) DO UPDATE SET shape = EXCLUDED.shape, last_ts = EXCLUDED.last_ts, state = EXCLUDED.state, "
    "saved_at = now() WHERE detector_state.last_ts <= EXCLUDED.last_ts")
_LOAD: Final = "SELECT node, shape, last_ts, state FROM detector_state WHERE node = ANY($1::text[]) AND last_ts >= $2"
_FIRING: Final = ("SELECT rule, fingerprint, starts_at FROM alerts WHERE status = 'firing' AND ends_at IS NULL "
                  "AND node = ANY($1::text[])")


@dataclass(frozen=True, slots=True)
class SavedState:
    """One node's saved state, as the detectors wrote it."""

    node: str
    shape: str
    last_ts: float
    state: bytes


async def save(conn: Any, states: Sequence[SavedState]) -> None:
    """Write each node's state; an older one never replaces a newer (two replicas, one slow)."""
    if states:
        await conn.execute(_SAVE, [s.node for s in states], [s.shape for s in states],
                           [datetime.fromtimestamp(s.last_ts, UTC) for s in states], [s.state for s in states])


async def load(conn: Any, nodes: Sequence[str], since: float) -> list[SavedState]:
    """The saved states of ``nodes`` whose newest record is not older than ``since``."""
    rows = await conn.fetch(_LOAD, list(nodes), datetime.fromtimestamp(since, UTC))
    return [SavedState(r["node"], r["shape"], r["last_ts"].timestamp(), bytes(r["state"])) for r in rows]


async def firing(conn: Any, nodes: Sequence[str]) -> set[tuple[str, str, float]]:
    """(rule, alert fingerprint, start) of the alerts firing on ``nodes``: notified before."""
    rows = await conn.fetch(_FIRING, list(nodes))
    return {(r["rule"], r["fingerprint"], r["starts_at"].timestamp()) for r in rows}
