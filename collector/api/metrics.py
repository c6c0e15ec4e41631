"""The collector's own ``/metrics``: ingest, consumer lag, database latency, anomalies, services.

Why computed at scrape time: the figures come from three places (the ingestor's and
consumer's counters in memory, a database round trip, and the store's current state),
and a Prometheus scrape every 15-60 s is the only reader; there is nothing to keep
up to date in between except the short history that turns the records counter into a
rate for people reading the page without PromQL.

Who may read it (:class:`collector.api.settings.ApiSettings`): with ``metrics_auth``
off (``gpuwatch up``'s default), anyone who reaches the port, as with any exporter;
with it on (the Helm chart's), a Bearer token of any role. An unscoped token gets
everything. A namespace-scoped token gets only what it could read from the API: the
per-service series of its namespaces' services and the open anomalies of its
namespaces; the collector's own figures (records, frames, lag, database) describe the
whole fleet, so they are left out for it. ``metrics_per_service`` off drops the
per-service series for everyone (service names stay out of Prometheus).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from fastapi import Request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from collector.api import auth, fleet
from collector.api.context import ApiContext
from collector.api.principal import Principal
from collector.store import anomalies as store_anomalies
from collector.store import ping as store_ping
from collector.store.errors import TRANSIENT, UndefinedTable
from telemetry.keys import SM_ACTIVE

_EVERYONE = Principal(0, "metrics", "viewer", None)
_COUNTERS = (
    ("records", "gpuwatch_collector_records", "GPU records stored"),
    ("events", "gpuwatch_collector_events", "GPU events stored"),
    ("dead_lettered", "gpuwatch_collector_dead_lettered_frames", "frames sent to the dead-letter topic"),
    ("frames_skipped", "gpuwatch_collector_frames_skipped", "frames skipped (waiting for a keyframe)"),
    ("duplicate_frames", "gpuwatch_collector_duplicate_frames", "frames seen before (redelivery)"),
)


class RateWindow:
    """Records per second over the last ``window`` seconds, from counter readings at scrapes."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._points: deque[tuple[float, int]] = deque()

    def observe(self, value: int, now: float | None = None) -> float:
        t = time.monotonic() if now is None else now
        self._points.append((t, value))
        while len(self._points) > 2 and self._points[1][0] <= t - self.window:
            self._points.popleft()
        t0, v0 = self._points[0]
        return (value - v0) / (t - t0) if t > t0 else 0.0


class _Snapshot:
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterator[Any]:
        yield from self.families


async def caller(ctx: ApiContext, request: Request) -> Principal:
    """Who scrapes: everyone when ``metrics_auth`` is off, else the Bearer token's owner (401 without one)."""
    if not ctx.settings.metrics_auth:
        return _EVERYONE
    return await auth.from_request(ctx, request)


async def render(ctx: ApiContext, rate: RateWindow, who: Principal = _EVERYONE) -> bytes:
    if who.scoped:
        families = await _store_families(ctx, who)
    else:
        families = await _collector_families(ctx, rate)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    data: bytes = generate_latest(registry)
    return data


async def _collector_families(ctx: ApiContext, rate: RateWindow) -> list[Any]:
    families: list[Any] = []
    counters = dict(ctx.stats.counters())
    for key, name, doc in _COUNTERS:
        c = CounterMetricFamily(name, doc)
        c.add_metric([], float(counters.get(key, 0)))
        families.append(c)
    g = GaugeMetricFamily("gpuwatch_collector_ingest_records_per_second", "records stored per second, last minute")
    g.add_metric([], rate.observe(int(counters.get("records", 0))))
    families.append(g)

    lag = dict(ctx.stats.lag())
    g = GaugeMetricFamily("gpuwatch_collector_consumer_lag_messages", "messages behind the partition's end",
                          labels=["partition"])
    for partition, behind in sorted(lag.items()):
        g.add_metric([str(partition)], float(behind))
    families.append(g)
    g = GaugeMetricFamily("gpuwatch_collector_consumer_lag_messages_all", "messages behind, all partitions")
    g.add_metric([], float(sum(lag.values())))
    families.append(g)
    families += list(ctx.stats.families())

    up = GaugeMetricFamily("gpuwatch_collector_db_up", "1 when the database answered this scrape")
    ping = GaugeMetricFamily("gpuwatch_collector_db_latency_seconds", "round trip of SELECT 1 at this scrape")
    try:
        ping.add_metric([], await store_ping.round_trip(ctx.pool))
        up.add_metric([], 1.0)
        db_ok = True
    except TRANSIENT:
        up.add_metric([], 0.0)
        db_ok = False
    families += [up, ping]

    if db_ok:
        families += await _store_families(ctx, _EVERYONE)
    return families


async def _store_families(ctx: ApiContext, who: Principal) -> list[Any]:
    anomalies = GaugeMetricFamily("gpuwatch_collector_open_anomalies", "anomalies still open", labels=["severity"])
    try:
        counts = await store_anomalies.open_by_severity(ctx.pool, who.scope_param())
    except UndefinedTable:
        counts = []
    for c in counts:
        anomalies.add_metric([c.severity], float(c.n))
    if not ctx.settings.metrics_per_service:
        return [anomalies]
    gpus = GaugeMetricFamily("gpuwatch_service_gpus", "GPUs a service holds now", labels=["namespace", "service"])
    sm = GaugeMetricFamily("gpuwatch_service_sm_active", "average SM active of the GPUs a service holds now",
                           labels=["namespace", "service"])
    mem = GaugeMetricFamily("gpuwatch_service_memory_used_mib", "process memory a service uses now (MiB)",
                            labels=["namespace", "service"])
    now = await fleet.fleet(ctx.pool, who, stale_after=timedelta(seconds=ctx.settings.stale_after_seconds))
    for svc in fleet.services(now, who):
        labels = [svc.namespace or "", svc.service]
        gpus.add_metric(labels, float(len(svc.gpus)))
        active = [g.metrics[SM_ACTIVE] for g in svc.gpus.values() if SM_ACTIVE in g.metrics]
        if active:
            sm.add_metric(labels, sum(active) / len(active))
        used = [h.used_memory_mib for g in svc.gpus.values() for h in g.holders
                if h.service == svc.service and h.namespace == svc.namespace and h.used_memory_mib is not None]
        mem.add_metric(labels, float(sum(used)))
    return [anomalies, gpus, sm, mem]
