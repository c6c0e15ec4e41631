"""``/services/{name}/kernels`` and its flame graph: what the opt-in CUPTI probe recorded of a service.

Why a 404 for "no data": a namespace-scoped caller must not learn that another namespace's
service exists, nor how much it ran, so a service it cannot see, a service without the probe
and a range without windows all answer the same 404 body.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Path, Query

from collector.api import kernels
from collector.api.auth import Ctx, Viewer
from collector.api.errors import ERROR_RESPONSES, ApiError, bad_request, check_request
from collector.api.models import KernelFrame, KernelsOut
from collector.api.params import parse_time
from collector.api.principal import Principal
from collector.store import kernels as store
from collector.store.errors import UndefinedTable

router = APIRouter(responses=ERROR_RESPONSES, dependencies=[Depends(check_request)])

#: the default range (the last hour), and the longest (the tables keep 14 days)
DEFAULT_SPAN: Final = timedelta(hours=1)
MAX_SPAN: Final = timedelta(days=31)

Name = Annotated[str, Path(max_length=253, description="the service")]
Text = Annotated[str | None, Query(max_length=253)]
Since = Annotated[str | None, Query(max_length=64, description="RFC 3339 or epoch seconds (default: until - 1 h)")]
Until = Annotated[str | None, Query(max_length=64, description="RFC 3339 or epoch seconds (default: now)")]
Limit = Annotated[int, Query(ge=1, le=200, description="kernels listed, heaviest first")]


def _selection(who: Principal, name: str, namespace: str | None, since: str | None,
               until: str | None) -> store.Selection:
    until_t = parse_time(until, "until", datetime.now(UTC))
    since_t = parse_time(since, "since", until_t - DEFAULT_SPAN)
    if since_t >= until_t:
        raise bad_request("since", "must be before until")
    if until_t - since_t > MAX_SPAN:
        raise bad_request("since", f"the range may span at most {MAX_SPAN.days} days (kernel windows are kept 14)")
    return store.Selection(name, since_t, until_t, namespace, who.scope_param())


def _none(name: str, namespace: str | None) -> ApiError:
    where = f" in namespace {namespace}" if namespace is not None else ""
    return ApiError(404, "not_found", f"no kernel statistics of service {name}{where} in this range (the CUPTI "
                    "probe is opt-in per workload)")


def _missing() -> ApiError:
    return ApiError(503, "not_installed", "the kernel tables do not exist yet (migration 0070)")


@router.get("/services/{name}/kernels", response_model=KernelsOut,
            summary="a service's kernels from the CUPTI probe: top kernels, copies, syncs, idle GPU, hints")
async def service_kernels(ctx: Ctx, who: Viewer, name: Name, namespace: Text = None, since: Since = None,
                          until: Until = None, limit: Limit = 20) -> KernelsOut:
    sel = _selection(who, name, namespace, since, until)
    try:
        out = await kernels.service_kernels(ctx.pool, sel, limit)
    except UndefinedTable:
        raise _missing() from None
    if out is None:
        raise _none(name, namespace)
    return out


@router.get("/services/{name}/kernels/flamegraph", response_model=KernelFrame,
            summary="a service's kernel time as the data frame of Grafana's flame graph panel")
async def service_kernels_flamegraph(ctx: Ctx, who: Viewer, name: Name, namespace: Text = None,
                                     since: Since = None, until: Until = None) -> Any:
    """Stacks ``service;pod;category;kernel`` weighted by kernel time in µs, as ``level``/``value``/
    ``self``/``label`` arrays (nested set, depth first, one root ``total``)."""
    sel = _selection(who, name, namespace, since, until)
    try:
        frame = await kernels.service_flamegraph(ctx.pool, sel)
    except UndefinedTable:
        raise _missing() from None
    if frame is None:
        raise _none(name, namespace)
    return KernelFrame.model_validate(frame)
