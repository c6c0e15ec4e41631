"""The ``anomalies`` table, as the API reads it: open anomalies counted by severity.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
The detectors and alerting write anomalies; the collector's ``/metrics`` counts the open
ones per severity, for everyone or for the namespaces of a scoped token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

_OPEN: Final = "SELECT severity, count(*) AS n FROM anomalies WHERE end_ts IS NULL"
_IN_SCOPE: Final = " AND namespace = ANY($1::text[])"
_GROUP: Final = " GROUP BY 1 ORDER BY 1"


@dataclass(frozen=True, slots=True)
class OpenCount:
    """How many anomalies of ``severity`` are still open."""

    severity: str
    n: int


async def open_by_severity(db: Any, scope: Sequence[str] | None = None) -> list[OpenCount]:
    """Open anomalies per severity, in severity order; only those of the namespaces in ``scope``
    unless it is None.

    Raises :class:`collector.store.errors.UndefinedTable` before the migrations ran."""
    if scope is None:
        rows = await db.fetch(_OPEN + _GROUP)
    else:
        rows = await db.fetch(_OPEN + _IN_SCOPE + _GROUP, list(scope))
    return [OpenCount(r["severity"], int(r["n"])) for r in rows]


_OPEN_BY_GPU: Final = "SELECT gpu, severity, kind, summary FROM anomalies WHERE end_ts IS NULL AND gpu IS NOT NULL"


@dataclass(frozen=True, slots=True)
class OpenOnGpu:
    """An open anomaly of one GPU."""

    gpu: str
    severity: str
    kind: str
    summary: str


async def open_on_gpus(db: Any, scope: Sequence[str] | None = None) -> list[OpenOnGpu]:
    """Open anomalies that name a GPU, oldest first; only those of the namespaces in ``scope``
    unless it is None.

    Raises :class:`collector.store.errors.UndefinedTable` before the migrations ran."""
    if scope is None:
        rows = await db.fetch(_OPEN_BY_GPU + " ORDER BY start_ts")
    else:
        rows = await db.fetch(_OPEN_BY_GPU + _IN_SCOPE + " ORDER BY start_ts", list(scope))
    return [OpenOnGpu(r["gpu"], r["severity"], r["kind"], r["summary"]) for r in rows]
