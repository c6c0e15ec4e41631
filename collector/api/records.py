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

The queries (filters as fixed clauses, values only as bind parameters) are in
:mod:`collector.store.records`; this module keeps page sizes, cursors, ids and redaction.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from collector.api.ids import IdCodec
from collector.api.params import encode_cursor
from collector.api.principal import Principal
from collector.store import records as store

REDACTED: Final = "redacted"
_CREATED_BY_RE: Final = re.compile(r"^token (\d+)(?: \(|$)")


@dataclass(slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


async def events(
    db: Any, who: Principal, *, start: datetime, end: datetime, node: str | None, gpu: str | None,
    kind: str | None, limit: int, cursor: list[Any] | None,
) -> Page:
    rows = await store.events(db, start=start, end=end, node=node, gpu=gpu, kind=kind, limit=limit + 1,
                              after=cursor, scope=who.scope_param())
    items = [asdict(r) for r in rows[:limit]]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = encode_cursor([last["ts"].isoformat(), last["gpu"], last["kind"],
                             last["code"] if last["code"] is not None else -1])
    return Page(items, nxt)


async def anomalies(
    db: Any, who: Principal, codec: IdCodec, *, start: datetime, end: datetime, filters: dict[str, str | None],
    status: str | None, limit: int, cursor: int | None,
) -> Page:
    rows = await store.anomalies(db, start=start, end=end, filters=filters, status=status, limit=limit + 1,
                                 before_id=cursor, scope=who.scope_param())
    items = [_anomaly(r, codec) for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


def _anomaly(row: store.AnomalyRow, codec: IdCodec) -> dict[str, Any]:
    item = asdict(row)
    status, reason = item.pop("profile_status"), item.pop("profile_reason")
    item["profile"] = None if status is None else {"status": status, "reason": reason}
    return {**item, "id": codec.encode("anomaly", row.id)}


async def alerts(
    db: Any, who: Principal, codec: IdCodec, *, start: datetime, end: datetime, filters: dict[str, str | None],
    limit: int, cursor: int | None,
) -> Page:
    rows = await store.alerts(db, start=start, end=end, filters=filters, limit=limit + 1, before_id=cursor,
                              scope=who.scope_param())
    items = [{**asdict(r), "id": codec.encode("alert", r.id),
              "anomaly_id": codec.encode("anomaly", r.anomaly_id) if r.anomaly_id else None}
             for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


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


def _silence(row: store.SilenceRow, view: Viewer) -> dict[str, Any]:
    return {**asdict(row), "id": view.codec.encode("silence", row.id), "created_by": view.created_by(row.created_by)}


async def silences(db: Any, view: Viewer, *, active_only: bool, limit: int, cursor: int | None) -> Page:
    rows = await store.silences(db, active_only=active_only, limit=limit + 1, before_id=cursor,
                                scope=view.who.scope_param())
    items = [_silence(r, view) for r in rows[:limit]]
    return Page(items, items[-1]["id"] if len(rows) > limit else None)


async def create_silence(
    db: Any, view: Viewer, *, matchers: dict[str, str], starts_at: datetime | None, ends_at: datetime,
    comment: str | None,
) -> dict[str, Any]:
    who = view.who
    created_by = f"token {who.token_id}" + (f" ({who.name})" if who.name else "")
    row = await store.create_silence(db, matchers=matchers, starts_at=starts_at, ends_at=ends_at,
                                     created_by=created_by, comment=comment)
    return _silence(row, view)


async def expire_silence(db: Any, view: Viewer, silence_id: int) -> dict[str, Any] | None:
    """End a silence now (kept for the record); None when the caller may not see it."""
    row = await store.expire_silence(db, silence_id, view.who.scope_param())
    return _silence(row, view) if row is not None else None
