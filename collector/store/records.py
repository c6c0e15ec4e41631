"""Events, anomalies, alerts and silences as the API lists them: filtered, newest first,
from a keyset cursor; and the API's writes of silences.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
:mod:`collector.api.records` keeps the policy: page sizes and next cursors, opaque ids,
who may read a silence's ``created_by``. Here ``scope`` (a scoped caller's namespaces)
keeps only rows of those namespaces (silences: their ``namespace`` matcher), never rows
without one; an event is in scope when the GPU's newest sample at most one minute before
it lists a process of those namespaces. ``limit`` is the number of rows read.

Filters are fixed clauses chosen by code; values only ever travel as bind parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

#: The columns anomalies and alerts can be filtered on by equality, in clause order.
ANOMALY_FILTERS: Final = ("kind", "severity", "gpu", "node", "namespace", "service")
ALERT_FILTERS: Final = ("status", "severity", "rule", "namespace", "service", "gpu", "node")


class _Query:
    """A WHERE clause built from fixed fragments, with numbered bind parameters."""

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def arg(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def add(self, clause: str, *values: Any) -> None:
        """``clause`` with ``{}`` placeholders, one per value."""
        self.clauses.append(clause.format(*(self.arg(v) for v in values)))

    def where(self) -> str:
        return ("WHERE " + " AND ".join(self.clauses)) if self.clauses else ""


def _scope(q: _Query, scope: Sequence[str] | None, column: str = "namespace") -> None:
    if scope is not None:
        q.add(f"{column} = ANY({{}}::text[])", list(scope))


@dataclass(frozen=True, slots=True)
class EventRow:
    ts: datetime
    node: str
    gpu: str
    kind: str
    code: int | None
    detail: str


_EVENT_HELD: Final = (
    "EXISTS (SELECT 1 FROM process_samples p WHERE p.gpu = e.gpu AND p.namespace = ANY({}::text[])"
    " AND p.ts = (SELECT max(s.ts) FROM gpu_samples s WHERE s.gpu = e.gpu AND s.ts <= e.ts"
    " AND s.ts > e.ts - interval '1 minute'))"
)


async def events(
    db: Any, *, start: datetime, end: datetime, node: str | None, gpu: str | None, kind: str | None,
    limit: int, after: Sequence[Any] | None, scope: Sequence[str] | None = None,
) -> list[EventRow]:
    """Events in [start, end), newest first, at most ``limit``; ``after`` is the sort key
    ``(ts, gpu, kind, code or -1)`` of the last row already read."""
    q = _Query()
    q.add("e.ts >= {}", start)
    q.add("e.ts < {}", end)
    if node is not None:
        q.add("e.node = {}", node)
    if gpu is not None:
        q.add("e.gpu = {}", gpu)
    if kind is not None:
        q.add("e.kind = {}", kind)
    if after is not None:
        q.add("(e.ts, e.gpu, e.kind, COALESCE(e.code, -1)) < ({}, {}, {}, {})", *after)
    if scope is not None:
        q.add(_EVENT_HELD, list(scope))
    sql = (
        "SELECT e.ts, e.node, e.gpu, e.kind, e.code, e.detail FROM events e "
        f"{q.where()} ORDER BY e.ts DESC, e.gpu DESC, e.kind DESC, COALESCE(e.code, -1) DESC LIMIT {q.arg(limit)}"
    )
    rows = await db.fetch(sql, *q.args)
    return [EventRow(r["ts"], r["node"], r["gpu"], r["kind"], r["code"], r["detail"]) for r in rows]


@dataclass(frozen=True, slots=True)
class AnomalyRow:
    id: int
    fingerprint: str
    kind: str
    severity: str
    gpu: str | None
    node: str | None
    namespace: str | None
    pod: str | None
    service: str | None
    metric: str | None
    start_ts: datetime
    end_ts: datetime | None
    summary: str
    causes: Any  # decoded JSON
    profile_status: str | None = None  # its CPU profile's (anomaly_profiles), None when none was asked for
    profile_reason: str | None = None


_ANOMALY_COLS: Final = ("id, fingerprint, kind, severity, gpu, node, namespace, pod, service, metric, start_ts,"
                        " end_ts, summary, causes")


async def anomalies(
    db: Any, *, start: datetime, end: datetime, filters: Mapping[str, str | None], status: str | None,
    limit: int, before_id: int | None, scope: Sequence[str] | None = None,
) -> list[AnomalyRow]:
    """Anomalies open at some time in [start, end), newest id first, at most ``limit``, ids
    below ``before_id``; ``filters`` by :data:`ANOMALY_FILTERS` column; ``status`` open or closed."""
    q = _Query()
    q.add("start_ts < {}", end)
    q.add("(end_ts IS NULL OR end_ts >= {})", start)
    for column in ANOMALY_FILTERS:
        value = filters.get(column)
        if value is not None:
            q.add(f"{column} = {{}}", value)
    if status == "open":
        q.clauses.append("end_ts IS NULL")
    elif status == "closed":
        q.clauses.append("end_ts IS NOT NULL")
    if before_id is not None:
        q.add("id < {}", before_id)
    _scope(q, scope)
    rows = await db.fetch(
        f"SELECT {_ANOMALY_COLS}, p.status AS profile_status, p.reason AS profile_reason FROM anomalies "
        f"LEFT JOIN anomaly_profiles p ON p.anomaly_id = anomalies.id {q.where()} "
        f"ORDER BY id DESC LIMIT {q.arg(limit)}", *q.args)
    return [AnomalyRow(**{**dict(r), "causes": json.loads(r["causes"])}) for r in rows]


@dataclass(frozen=True, slots=True)
class AlertRow:
    id: int
    rule: str
    fingerprint: str
    status: str
    severity: str
    namespace: str | None
    service: str | None
    gpu: str | None
    node: str | None
    summary: str
    labels: Any  # decoded JSON
    starts_at: datetime
    ends_at: datetime | None
    anomaly_id: int | None
    updated_at: datetime


_ALERT_COLS: Final = ("id, rule, fingerprint, status, severity, namespace, service, gpu, node, summary, labels,"
                      " starts_at, ends_at, anomaly_id, updated_at")


async def alerts(
    db: Any, *, start: datetime, end: datetime, filters: Mapping[str, str | None], limit: int,
    before_id: int | None, scope: Sequence[str] | None = None,
) -> list[AlertRow]:
    """Alerts active at some time in [start, end), newest id first, at most ``limit``, ids
    below ``before_id``; ``filters`` by :data:`ALERT_FILTERS` column."""
    q = _Query()
    q.add("starts_at < {}", end)
    q.add("(ends_at IS NULL OR ends_at >= {})", start)
    for column in ALERT_FILTERS:
        value = filters.get(column)
        if value is not None:
            q.add(f"{column} = {{}}", value)
    if before_id is not None:
        q.add("id < {}", before_id)
    _scope(q, scope)
    rows = await db.fetch(
        f"SELECT {_ALERT_COLS} FROM alerts {q.where()} ORDER BY id DESC LIMIT {q.arg(limit)}", *q.args)
    return [AlertRow(**{**dict(r), "labels": json.loads(r["labels"])}) for r in rows]


@dataclass(frozen=True, slots=True)
class SilenceRow:
    id: int
    matchers: Any  # decoded JSON: label -> value
    starts_at: datetime
    ends_at: datetime
    created_by: str | None
    comment: str | None
    created_at: datetime


_SILENCE_COLS: Final = "id, matchers, starts_at, ends_at, created_by, comment, created_at"
_SILENCE_SCOPE: Final = "matchers->>'namespace'"


def _silence(r: Any) -> SilenceRow:
    return SilenceRow(**{**dict(r), "matchers": json.loads(r["matchers"])})


async def silences(
    db: Any, *, active_only: bool, limit: int, before_id: int | None, scope: Sequence[str] | None = None,
) -> list[SilenceRow]:
    """Silences (only those not yet ended if ``active_only``), newest id first, at most ``limit``."""
    q = _Query()
    if active_only:
        q.clauses.append("ends_at > now()")
    if before_id is not None:
        q.add("id < {}", before_id)
    _scope(q, scope, _SILENCE_SCOPE)
    rows = await db.fetch(
        f"SELECT {_SILENCE_COLS} FROM silences {q.where()} ORDER BY id DESC LIMIT {q.arg(limit)}", *q.args)
    return [_silence(r) for r in rows]


async def create_silence(
    db: Any, *, matchers: Mapping[str, str], starts_at: datetime | None, ends_at: datetime,
    created_by: str, comment: str | None,
) -> SilenceRow:
    """A new silence, starting now unless ``starts_at`` is given."""
    row = await db.fetchrow(
        "INSERT INTO silences (matchers, starts_at, ends_at, created_by, comment) "
        f"VALUES ($1::jsonb, COALESCE($2, now()), $3, $4, $5) RETURNING {_SILENCE_COLS}",
        json.dumps(dict(matchers)), starts_at, ends_at, created_by, comment,
    )
    return _silence(row)


async def expire_silence(db: Any, silence_id: int, scope: Sequence[str] | None = None) -> SilenceRow | None:
    """End a silence now (kept for the record); None when there is none of that id in ``scope``."""
    q = _Query()
    q.add("id = {}", silence_id)
    _scope(q, scope, _SILENCE_SCOPE)
    row = await db.fetchrow(
        f"UPDATE silences SET ends_at = LEAST(ends_at, now()) {q.where()} RETURNING {_SILENCE_COLS}", *q.args)
    return _silence(row) if row is not None else None
