"""Events, anomalies, alerts and silences: filtered lists with cursor pagination.

Why keyset cursors: these lists grow without bound and are read newest first; a cursor
holding the last row's sort key keeps every page an index range scan and stable while
new rows arrive (an offset would skip or repeat rows).

Scopes: anomalies, alerts and silences carry a namespace (silences in their matchers);
a scoped caller sees only rows whose namespace is in its scope, never rows without one.
An event belongs to the GPU's holder: a scoped caller sees it when the GPU's newest
sample at most one minute before the event lists a process of its namespaces.

Ids and cursors: anomaly, alert and silence row ids never leave this module as numbers;
they are opaque ids (:mod:`collector.api.ids`), and the cursor of those lists is the
last row's opaque id, so neither reveals how many rows other namespaces have. A
silence's ``created_by`` is shown to the token that created it and to admins who may
see that token; to anyone else it reads ``redacted``.

Filters are fixed clauses chosen by code; values only ever travel as bind parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from collector.api.ids import IdCodec
from collector.api.params import encode_cursor
from collector.api.principal import Principal

REDACTED: Final = "redacted"
_CREATED_BY_RE: Final = re.compile(r"^token (\d+)(?: \(|$)")


@dataclass(slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


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


_EVENT_HELD: Final = (
    "EXISTS (SELECT 1 FROM process_samples p WHERE p.gpu = e.gpu AND p.namespace = ANY({}::text[])"
    " AND p.ts = (SELECT max(s.ts) FROM gpu_samples s WHERE s.gpu = e.gpu AND s.ts <= e.ts"
    " AND s.ts > e.ts - interval '1 minute'))"
)


async def events(
    db: Any, who: Principal, *, start: datetime, end: datetime, node: str | None, gpu: str | None,
    kind: str | None, limit: int, cursor: list[Any] | None,
) -> Page:
    q = _Query()
    q.add("e.ts >= {}", start)
    q.add("e.ts < {}", end)
    if node is not None:
        q.add("e.node = {}", node)
    if gpu is not None:
        q.add("e.gpu = {}", gpu)
    if kind is not None:
        q.add("e.kind = {}", kind)
    if cursor is not None:
        q.add("(e.ts, e.gpu, e.kind, COALESCE(e.code, -1)) < ({}, {}, {}, {})", *cursor)
    if who.scoped:
        q.add(_EVENT_HELD, who.scope_param())
    sql = (
        "SELECT e.ts, e.node, e.gpu, e.kind, e.code, e.detail FROM events e "
        f"{q.where()} ORDER BY e.ts DESC, e.gpu DESC, e.kind DESC, COALESCE(e.code, -1) DESC LIMIT {q.arg(limit + 1)}"
    )
    rows = await db.fetch(sql, *q.args)
    items = [dict(r) for r in rows[:limit]]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = encode_cursor([last["ts"].isoformat(), last["gpu"], last["kind"],
                             last["code"] if last["code"] is not None else -1])
    return Page(items, nxt)


def _scope(q: _Query, who: Principal, column: str = "namespace") -> None:
    if who.scoped:
        q.add(f"{column} = ANY({{}}::text[])", who.scope_param())


_ANOMALY_COLS: Final = ("id, fingerprint, kind, severity, gpu, node, namespace, pod, service, metric, start_ts,"
                        " end_ts, summary, causes")


async def anomalies(
    db: Any, who: Principal, codec: IdCodec, *, start: datetime, end: datetime, filters: dict[str, str | None],
    status: str | None, limit: int, cursor: int | None,
) -> Page:
    q = _Query()
    q.add("start_ts < {}", end)
    q.add("(end_ts IS NULL OR end_ts >= {})", start)
    for column in ("kind", "severity", "gpu", "node", "namespace", "service"):
        value = filters.get(column)
        if value is not None:
            q.add(f"{column} = {{}}", value)
    if status == "open":
        q.clauses.append("end_ts IS NULL")
    elif status == "closed":
        q.clauses.append("end_ts IS NOT NULL")
    if cursor is not None:
        q.add("id < {}", cursor)
    _scope(q, who)
    rows = await db.fetch(
        f"SELECT {_ANOMALY_COLS} FROM anomalies {q.where()} ORDER BY id DESC LIMIT {q.arg(limit + 1)}", *q.args)
    items = [{**dict(r), "id": codec.encode("anomaly", r["id"]), "causes": json.loads(r["causes"])}
             for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


_ALERT_COLS: Final = ("id, rule, fingerprint, status, severity, namespace, service, gpu, node, summary, labels,"
                      " starts_at, ends_at, anomaly_id, updated_at")


async def alerts(
    db: Any, who: Principal, codec: IdCodec, *, start: datetime, end: datetime, filters: dict[str, str | None],
    limit: int, cursor: int | None,
) -> Page:
    q = _Query()
    q.add("starts_at < {}", end)
    q.add("(ends_at IS NULL OR ends_at >= {})", start)
    for column in ("status", "severity", "rule", "namespace", "service", "gpu", "node"):
        value = filters.get(column)
        if value is not None:
            q.add(f"{column} = {{}}", value)
    if cursor is not None:
        q.add("id < {}", cursor)
    _scope(q, who)
    rows = await db.fetch(
        f"SELECT {_ALERT_COLS} FROM alerts {q.where()} ORDER BY id DESC LIMIT {q.arg(limit + 1)}", *q.args)
    items = [{**dict(r), "id": codec.encode("alert", r["id"]), "labels": json.loads(r["labels"]),
              "anomaly_id": codec.encode("anomaly", r["anomaly_id"]) if r["anomaly_id"] else None}
             for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


_SILENCE_COLS: Final = "id, matchers, starts_at, ends_at, created_by, comment, created_at"


def created_by_token(created_by: str | None) -> int | None:
    """The token id in a ``created_by`` this API wrote (``token 12 (name)``), else None."""
    match = _CREATED_BY_RE.match(created_by or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Viewer:
    """What a caller may see of silences: its opaque ids and whose ``created_by``."""

    codec: IdCodec
    who: Principal
    tokens_seen: Collection[int] | None  # token ids whose names the caller may see; None: all

    def created_by(self, value: str | None) -> str | None:
        if value is None or self.tokens_seen is None:
            return value
        token = created_by_token(value)
        if token is not None and (token == self.who.token_id or token in self.tokens_seen):
            return value
        return REDACTED


def _silence(row: Any, view: Viewer) -> dict[str, Any]:
    return {**dict(row), "id": view.codec.encode("silence", row["id"]), "matchers": json.loads(row["matchers"]),
            "created_by": view.created_by(row["created_by"])}


async def silences(db: Any, view: Viewer, *, active_only: bool, limit: int, cursor: int | None) -> Page:
    q = _Query()
    if active_only:
        q.clauses.append("ends_at > now()")
    if cursor is not None:
        q.add("id < {}", cursor)
    _scope(q, view.who, "matchers->>'namespace'")
    rows = await db.fetch(
        f"SELECT {_SILENCE_COLS} FROM silences {q.where()} ORDER BY id DESC LIMIT {q.arg(limit + 1)}", *q.args)
    items = [_silence(r, view) for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


async def create_silence(
    db: Any, view: Viewer, *, matchers: dict[str, str], starts_at: datetime | None, ends_at: datetime,
    comment: str | None,
) -> dict[str, Any]:
    who = view.who
    created_by = f"token {who.token_id}" + (f" ({who.name})" if who.name else "")
    row = await db.fetchrow(
        "INSERT INTO silences (matchers, starts_at, ends_at, created_by, comment) "
        f"VALUES ($1::jsonb, COALESCE($2, now()), $3, $4, $5) RETURNING {_SILENCE_COLS}",
        json.dumps(matchers), starts_at, ends_at, created_by, comment,
    )
    return _silence(row, view)


async def expire_silence(db: Any, view: Viewer, silence_id: int) -> dict[str, Any] | None:
    """End a silence now (kept for the record); None when the caller may not see it."""
    q = _Query()
    q.add("id = {}", silence_id)
    _scope(q, view.who, "matchers->>'namespace'")
    row = await db.fetchrow(
        f"UPDATE silences SET ends_at = LEAST(ends_at, now()) {q.where()} RETURNING {_SILENCE_COLS}", *q.args)
    return _silence(row, view) if row is not None else None
