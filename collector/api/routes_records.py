"""``/events``, ``/anomalies``, ``/alerts`` and ``/silences``: filters and cursor pages.

Anomaly, alert and silence ids (and their lists' cursors) are opaque (:mod:`collector.api.ids`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from collector.api import flamegraph, records, tokens
from collector.api.auth import Ctx, Operator, Viewer
from collector.api.context import ApiContext
from collector.api.errors import ERROR_RESPONSES, ApiError, bad_request, check_request, not_found
from collector.api.ids import IdCodec, Kind
from collector.api.models import (
    AlertPage,
    AnomalyPage,
    EventPage,
    ProfileFrame,
    SilenceIn,
    SilenceOut,
    SilencePage,
)
from collector.api.params import decode_cursor, span
from collector.api.principal import Principal
from collector.store import profiles
from collector.store.errors import UndefinedTable

router = APIRouter(responses=ERROR_RESPONSES, dependencies=[Depends(check_request)])

Text = Annotated[str | None, Query(max_length=253)]
TimeParam = Annotated[str | None, Query(max_length=64, description="RFC 3339 or epoch seconds")]
Limit = Annotated[int, Query(ge=1, le=1000, description="rows per page")]
Cursor = Annotated[str | None, Query(max_length=512, description="next_cursor of the previous page")]


def _range(start: str | None, end: str | None, default_span: timedelta) -> tuple[datetime, datetime]:
    return span(start, end, default_span=default_span)


def _opaque(codec: IdCodec, kind: Kind, value: str | None, field: str) -> int | None:
    """The row id behind an opaque id (or cursor) the client sent; 400 naming ``field`` if it is not one."""
    if value is None or value == "":
        return None
    row_id = codec.decode(kind, value)
    if row_id is None:
        article = "an" if kind[0] in "aeiou" else "a"
        raise bad_request(field, f"not {article} {kind} id returned by this API")
    return row_id


async def _silence_view(ctx: ApiContext, who: Principal) -> records.Viewer:
    """Whose names ``who`` may read in ``created_by``: its own; admins also the tokens they may list."""
    seen: set[int] | None = set()
    if who.role == "admin":
        if who.namespaces is None:
            seen = None
        else:
            scope = set(who.namespaces)
            seen = {t.id for t in await tokens.list_tokens(ctx.pool)
                    if t.namespaces is not None and set(t.namespaces) <= scope}
    return records.Viewer(await ctx.codec(), who, seen)


def _tables_missing() -> ApiError:
    return ApiError(503, "not_installed", "the anomaly and alert tables do not exist yet (migration 0020)")


@router.get("/events", response_model=EventPage, summary="GPU events (XID, ECC, throttling...), newest first")
async def list_events(
    ctx: Ctx, who: Viewer, start: TimeParam = None, end: TimeParam = None, node: Text = None, gpu: Text = None,
    kind: Text = None, limit: Limit = 100, cursor: Cursor = None,
) -> EventPage:
    start_t, end_t = _range(start, end, timedelta(days=7))
    page = await records.events(
        ctx.pool, who, start=start_t, end=end_t, node=node, gpu=gpu, kind=kind, limit=limit,
        cursor=decode_cursor(cursor, (datetime, str, str, int)),
    )
    return EventPage.model_validate({"items": page.items, "next_cursor": page.next_cursor})


Status = Annotated[str | None, Query(pattern="^(open|closed)$", description="open or closed")]


@router.get("/anomalies", response_model=AnomalyPage, summary="detected anomalies, newest first")
async def list_anomalies(
    ctx: Ctx, who: Viewer, start: TimeParam = None, end: TimeParam = None, status: Status = None,
    kind: Text = None, severity: Text = None, gpu: Text = None, node: Text = None, namespace: Text = None,
    service: Text = None, limit: Limit = 100, cursor: Cursor = None,
) -> AnomalyPage:
    start_t, end_t = _range(start, end, timedelta(days=7))
    filters = {"kind": kind, "severity": severity, "gpu": gpu, "node": node, "namespace": namespace,
               "service": service}
    codec = await ctx.codec()
    try:
        page = await records.anomalies(ctx.pool, who, codec, start=start_t, end=end_t, filters=filters,
                                       status=status, limit=limit, cursor=_opaque(codec, "anomaly", cursor, "cursor"))
    except UndefinedTable:
        raise _tables_missing() from None
    return AnomalyPage.model_validate({"items": page.items, "next_cursor": page.next_cursor})


@router.get("/anomalies/{anomaly_id}/profile", response_model=ProfileFrame,
            summary="an anomaly's CPU profile, as the data frame of Grafana's flame graph panel")
async def anomaly_profile(
    ctx: Ctx, who: Viewer, anomaly_id: Annotated[str, Path(max_length=64, description="the anomaly's id")],
) -> ProfileFrame:
    """The folded stacks py-spy sampled when the anomaly opened, as ``level``/``value``/``self``/``label``
    arrays (nested set, depth first); 404 ``no_profile`` with the reason when there are none."""
    codec = await ctx.codec()
    row_id = _opaque(codec, "anomaly", anomaly_id, "anomaly_id")
    assert row_id is not None  # a path segment is never empty
    try:
        row = await profiles.get(ctx.pool, row_id, who.scope_param())
        visible = row is not None or await profiles.anomaly_visible(ctx.pool, row_id, who.scope_param())
    except UndefinedTable:
        raise ApiError(503, "not_installed", "the anomaly profile table does not exist yet (migration 0062)") from None
    if not visible:
        raise not_found(f"anomaly {anomaly_id}")
    if row is None:
        raise ApiError(404, "no_profile", f"anomaly {anomaly_id} has no CPU profile: none was asked for (one is, "
                       "when a throughput_drop opens)")
    if row.status != "captured":
        raise ApiError(404, "no_profile", f"anomaly {anomaly_id} has no CPU profile: {row.status}: {row.reason}")
    meta = {"anomaly_id": anomaly_id, "status": row.status, "reason": row.reason, "samples": row.samples,
            "captured_at": row.captured_at.isoformat() if row.captured_at else None, "processes": row.processes}
    return ProfileFrame.model_validate(flamegraph.data_frame(flamegraph.build(row.stacks), meta))


AlertStatus = Annotated[str | None, Query(pattern="^(firing|resolved)$", description="firing or resolved")]


@router.get("/alerts", response_model=AlertPage, summary="alerts, newest first")
async def list_alerts(
    ctx: Ctx, who: Viewer, start: TimeParam = None, end: TimeParam = None, status: AlertStatus = None,
    severity: Text = None, rule: Text = None, namespace: Text = None, service: Text = None, gpu: Text = None,
    node: Text = None, limit: Limit = 100, cursor: Cursor = None,
) -> AlertPage:
    start_t, end_t = _range(start, end, timedelta(days=7))
    filters = {"status": status, "severity": severity, "rule": rule, "namespace": namespace, "service": service,
               "gpu": gpu, "node": node}
    codec = await ctx.codec()
    try:
        page = await records.alerts(ctx.pool, who, codec, start=start_t, end=end_t, filters=filters, limit=limit,
                                    cursor=_opaque(codec, "alert", cursor, "cursor"))
    except UndefinedTable:
        raise _tables_missing() from None
    return AlertPage.model_validate({"items": page.items, "next_cursor": page.next_cursor})


@router.get("/silences", response_model=SilencePage, summary="alert silences, newest first (operator)")
async def list_silences(
    ctx: Ctx, who: Operator, active: Annotated[bool, Query(description="only silences not yet ended")] = False,
    limit: Limit = 100, cursor: Cursor = None,
) -> SilencePage:
    view = await _silence_view(ctx, who)
    try:
        page = await records.silences(ctx.pool, view, active_only=active, limit=limit,
                                      cursor=_opaque(view.codec, "silence", cursor, "cursor"))
    except UndefinedTable:
        raise _tables_missing() from None
    return SilencePage.model_validate({"items": page.items, "next_cursor": page.next_cursor})


@router.post("/silences", response_model=SilenceOut, status_code=201, summary="silence matching alerts (operator)")
async def create_silence(ctx: Ctx, who: Operator, body: SilenceIn) -> SilenceOut:
    now = datetime.now(UTC)
    starts = body.starts_at.astimezone(UTC) if body.starts_at is not None and body.starts_at.tzinfo else None
    if body.starts_at is not None and starts is None:
        raise bad_request("starts_at", "needs an offset (Z or +hh:mm)")
    if body.ends_at is not None:
        if body.ends_at.tzinfo is None:
            raise bad_request("ends_at", "needs an offset (Z or +hh:mm)")
        ends = body.ends_at.astimezone(UTC)
    elif body.duration_seconds is not None:
        ends = (starts or now) + timedelta(seconds=body.duration_seconds)
    else:
        raise bad_request("ends_at", "give ends_at or duration_seconds")
    if ends <= (starts or now):
        raise bad_request("ends_at", "must be after the start (and in the future)")
    if who.scoped and not who.sees_namespace(body.matchers.get("namespace")):
        raise ApiError(403, "forbidden", "a namespace-scoped token may only silence alerts of its namespaces: "
                       f"matchers must include namespace = one of {list(who.namespaces or ())}", field="matchers")
    view = await _silence_view(ctx, who)
    try:
        row = await records.create_silence(ctx.pool, view, matchers=body.matchers, starts_at=starts, ends_at=ends,
                                           comment=body.comment)
    except UndefinedTable:
        raise _tables_missing() from None
    return SilenceOut.model_validate(row)


@router.delete("/silences/{silence_id}", response_model=SilenceOut, summary="end a silence now (operator)")
async def delete_silence(
    ctx: Ctx, who: Operator, silence_id: Annotated[str, Path(max_length=64, description="the silence's id")],
) -> Any:
    view = await _silence_view(ctx, who)
    row_id = _opaque(view.codec, "silence", silence_id, "silence_id")
    assert row_id is not None  # a path segment is never empty
    try:
        row = await records.expire_silence(ctx.pool, view, row_id)
    except UndefinedTable:
        raise _tables_missing() from None
    if row is None:
        raise not_found(f"silence {silence_id}")
    return SilenceOut.model_validate(row)
