"""``/gpus``, ``/nodes``, ``/services``: the fleet now, GPU series and service history."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from collector.api import fleet, history, series
from collector.api.auth import Ctx, Viewer
from collector.api.context import ApiContext
from collector.api.errors import ERROR_RESPONSES, bad_request, check_request, not_found
from collector.api.models import (
    GpuList,
    GpuOut,
    HistoryOut,
    HolderOut,
    NodeDetail,
    NodeList,
    NodeOut,
    PodOnGpu,
    SeriesOut,
    ServiceGpu,
    ServiceList,
    ServiceOut,
)
from collector.api.params import check_points, time_range
from collector.api.principal import Principal
from collector.store.schema import BY_KEY

router = APIRouter(responses=ERROR_RESPONSES, dependencies=[Depends(check_request)])

Text = Annotated[str | None, Query(max_length=253)]
TimeParam = Annotated[str | None, Query(max_length=64, description="RFC 3339 or epoch seconds")]
StepParam = Annotated[str | None, Query(max_length=32, description="seconds, or 500ms, 60s, 5m, 1h")]


def _gpu_out(g: fleet.GpuNow) -> GpuOut:
    return GpuOut(
        gpu=g.gpu, node=g.node, gpu_index=g.gpu_index, model=g.model, driver_version=g.driver_version,
        pci_bus_id=g.pci_bus_id, mig_profile=g.mig_profile, parent_gpu=g.parent_gpu, first_seen=g.first_seen,
        last_seen=g.last_seen, sample_ts=g.sample_ts, sample_age_seconds=g.sample_age_seconds, stale=not g.fresh,
        health=g.health,
        reasons=g.reasons, open_anomalies=g.open_anomaly_count, open_anomalies_by_severity=g.open_anomalies,
        metrics={k: float(v) for k, v in g.metrics.items()},
        pods=[PodOnGpu(namespace=p.namespace, pod=p.pod, service=p.service, processes=p.processes,
                       used_memory_mib=p.used_memory_mib) for p in g.pods()],
        holders=[HolderOut(namespace=h.namespace, pod=h.pod, service=h.service, container=h.container,
                           used_memory_mib=h.used_memory_mib) for h in g.holders],
    )


def _node_out(n: fleet.NodeNow) -> NodeOut:
    by_severity = n.open_anomalies()
    return NodeOut(node=n.node, gpu_count=len(n.gpus), models=n.models, last_seen=n.last_seen,
                   health=n.health_counts(), open_anomalies=sum(by_severity.values()),
                   open_anomalies_by_severity=by_severity)


async def _fleet(ctx: ApiContext, who: Principal, node: str | None = None) -> list[fleet.GpuNow]:
    return await fleet.fleet(ctx.pool, who, node=node,
                             stale_after=timedelta(seconds=ctx.settings.stale_after_seconds))


@router.get("/gpus", response_model=GpuList, summary="GPU inventory, newest readings, pods and health")
async def list_gpus(ctx: Ctx, who: Viewer, node: Text = None) -> GpuList:
    return GpuList(items=[_gpu_out(g) for g in await _fleet(ctx, who, node)])


@router.get("/gpus/{uuid}/series", response_model=SeriesOut,
            summary="one GPU's metrics over time (raw, 1-minute or 1-hour data, chosen from the step)")
async def gpu_series(
    ctx: Ctx, who: Viewer, uuid: str,
    metrics: Annotated[str | None, Query(max_length=2000, description="comma-separated catalog keys")] = None,
    start: TimeParam = None, end: TimeParam = None, step: StepParam = None,
) -> Response:
    keys = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else list(series.DEFAULT_METRICS)
    keys = list(dict.fromkeys(keys))
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown or not keys:
        raise bad_request("metrics", f"unknown metric keys {unknown} (see `gpuwatch catalog`)")
    rng = time_range(start, end, step, default_span=timedelta(hours=1), default_step=timedelta(minutes=1))
    check_points(rng.buckets * len(keys), ctx.settings.max_points)
    if not await series.gpu_visible(ctx.pool, who, uuid, rng.start, rng.end):
        raise not_found(f"GPU {uuid}")
    source, data = await series.gpu_series_json(ctx.pool, who, uuid, keys, rng.start, rng.end, rng.step)
    head = json.dumps({"gpu": uuid, "source": source, "step_seconds": rng.step.total_seconds(),
                       "start": rng.start.isoformat(), "end": rng.end.isoformat()})
    return Response(head[:-1] + ", " + data[1:], media_type="application/json")


@router.get("/nodes", response_model=NodeList, summary="nodes with GPU counts and health")
async def list_nodes(ctx: Ctx, who: Viewer) -> NodeList:
    return NodeList(items=[_node_out(n) for n in fleet.nodes(await _fleet(ctx, who))])


@router.get("/nodes/{node}", response_model=NodeDetail, summary="one node and its GPUs")
async def get_node(ctx: Ctx, who: Viewer, node: str) -> NodeDetail:
    found = fleet.nodes(await _fleet(ctx, who, node))
    if not found:
        raise not_found(f"node {node}")
    n = found[0]
    return NodeDetail(**_node_out(n).model_dump(), gpus=[_gpu_out(g) for g in n.gpus])


@router.get("/services", response_model=ServiceList, summary="services and the GPUs they hold now")
async def list_services(ctx: Ctx, who: Viewer, namespace: Text = None) -> ServiceList:
    gpus = await _fleet(ctx, who)
    items = [
        ServiceOut(namespace=s.namespace, service=s.service, pods=sorted(s.pods), gpu_count=len(s.gpus),
                   gpus=[ServiceGpu(gpu=g.gpu, node=g.node, model=g.model) for g in s.gpus.values()])
        for s in fleet.services(gpus, who) if namespace is None or s.namespace == namespace
    ]
    return ServiceList(items=items)


_HISTORY_VALUES = 9  # numbers per step row, for the point limit


def _usage(u: history.Usage) -> dict[str, object]:
    return {name: getattr(u, name) for name in history.Usage.__slots__}


@router.get("/services/{name}/history", response_model=HistoryOut,
            summary="per step: GPU-seconds, SM/tensor active, memory, energy, cost; per-pod totals")
async def service_history(
    ctx: Ctx, who: Viewer, name: str, namespace: Text = None,
    start: TimeParam = None, end: TimeParam = None, step: StepParam = None,
) -> JSONResponse:
    rng = time_range(start, end, step, default_span=timedelta(hours=24), default_step=timedelta(hours=1))
    if rng.step % timedelta(minutes=1):
        raise bad_request("step", "service history is read from 1-minute rollups: use whole minutes (60s, 5m, 1h)")
    check_points(rng.buckets * _HISTORY_VALUES, ctx.settings.max_points)
    if not await history.service_known(ctx.pool, who, name, namespace) and not any(
            s.service == name and (namespace is None or s.namespace == namespace)
            for s in fleet.services(await _fleet(ctx, who), who)):
        raise not_found(f"service {name}" + (f" in namespace {namespace}" if namespace is not None else ""))
    price = ctx.settings.price_per_gpu_hour
    h = await history.service_history(ctx.pool, who, name, rng.start, rng.end, rng.step,
                                      namespace=namespace, price_per_gpu_hour=price)
    body = {
        "service": name, "namespace": namespace, "start": rng.start.isoformat(), "end": rng.end.isoformat(),
        "step_seconds": rng.step.total_seconds(), "range_seconds": h.range_seconds,
        "price_per_gpu_hour": price, "currency": ctx.settings.currency,
        "steps": [{"t": s.t.timestamp(), **_usage(s)} for s in h.steps],
        "pods": [{"namespace": p.namespace, "pod": p.pod, **_usage(p)} for p in h.pods],
        "total": _usage(h.total),
    }
    return JSONResponse(body)
