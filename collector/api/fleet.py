"""The fleet now: each GPU's newest sample, the pods on it, its health; nodes and services.

Why one query for all three views: ``/gpus``, ``/nodes`` and ``/services`` are views of
the same snapshot (per GPU, its newest sample and that sample's processes), and building
nodes and services from the GPU rows the caller may see means a namespace-scoped token
can never count a GPU it may not see. Health comes from :func:`collector.api.health.judge`
(open anomalies the caller may see, and the newest sample's age); a node's open anomaly
counts are the sums of its GPUs' counts, so ``/nodes`` and ``/gpus`` always agree.

A GPU's index is its position by PCI bus id among its node's GPUs (NVML enumerates
devices in PCI bus order, so this is the index ``nvidia-smi`` shows); MIG instances take
their parent's. It is derived in the store's query (:mod:`collector.store.fleet`) because the inventory
keeps the bus id, not the index.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.api.health import Health, OpenAnomaly, judge
from collector.api.principal import Principal
from collector.store.anomalies import open_on_gpus
from collector.store.errors import UndefinedTable
from collector.store.fleet import GpuNowRow, gpus_now
from telemetry.keys import (
    CLOCKS_EVENT_REASONS,
    DRAM_ACTIVE,
    ECC_DBE_VOL_TOTAL,
    FB_FREE,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    MEMORY_TEMP,
    PIPE_TENSOR_ACTIVE,
    POWER_MGMT_LIMIT,
    POWER_USAGE,
    SM_ACTIVE,
    SM_CLOCK,
    XID_ERRORS,
)

DEFAULT_STALE_AFTER: Final = timedelta(seconds=60)

#: The metrics shown for each GPU in the fleet view (catalog keys).
FLEET_METRICS: Final[tuple[str, ...]] = (
    SM_ACTIVE,
    PIPE_TENSOR_ACTIVE,
    DRAM_ACTIVE,
    GPU_UTIL,
    FB_USED,
    FB_FREE,
    POWER_USAGE,
    POWER_MGMT_LIMIT,
    GPU_TEMP,
    MEMORY_TEMP,
    SM_CLOCK,
    CLOCKS_EVENT_REASONS,
    XID_ERRORS,
    ECC_DBE_VOL_TOTAL,
)


@dataclass(slots=True)
class PodOnGpu:
    namespace: str | None
    pod: str | None
    service: str | None
    processes: int
    used_memory_mib: float | None


_ROW_FIELDS: Final = tuple(f.name for f in fields(GpuNowRow))


@dataclass(frozen=True, slots=True)
class GpuNow(GpuNowRow):
    """The store's row of a GPU now, and what the API judges of it."""

    health: Health = "ok"
    reasons: list[str] = field(default_factory=list)
    open_anomalies: dict[str, int] = field(default_factory=dict)  # severity -> count
    sample_age_seconds: float | None = None
    fresh: bool = False  # the newest sample is younger than the stale limit

    @property
    def open_anomaly_count(self) -> int:
        return sum(self.open_anomalies.values())

    def pods(self) -> list[PodOnGpu]:
        """The holders grouped by pod: one entry per pod, its processes' memory summed."""
        found: dict[tuple[str | None, str | None, str | None], PodOnGpu] = {}
        for h in self.holders:
            key = (h.namespace, h.pod, h.service)
            pod = found.get(key)
            if pod is None:
                pod = found[key] = PodOnGpu(h.namespace, h.pod, h.service, 0, None)
            pod.processes += 1
            if h.used_memory_mib is not None:
                pod.used_memory_mib = (pod.used_memory_mib or 0.0) + h.used_memory_mib
        return list(found.values())


async def open_anomalies_by_gpu(db: Any, who: Principal) -> dict[str, list[OpenAnomaly]]:
    """Open anomalies per GPU that ``who`` may see; empty while the anomaly tables do not exist."""
    try:
        rows = await open_on_gpus(db, who.scope_param())
    except UndefinedTable:
        return {}
    out: dict[str, list[OpenAnomaly]] = {}
    for r in rows:
        out.setdefault(r.gpu, []).append(OpenAnomaly(r.severity, r.kind, r.summary))
    return out


async def fleet(
    db: Any, who: Principal, *, node: str | None = None, now: datetime | None = None,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
) -> list[GpuNow]:
    """Every GPU ``who`` may see now (optionally of one node), newest sample, holders and health included."""
    rows = await gpus_now(db, FLEET_METRICS, node=node, scope=who.scope_param())
    anomalies = await open_anomalies_by_gpu(db, who)
    at = now or datetime.now(UTC)
    out: list[GpuNow] = []
    for r in rows:
        found = anomalies.get(r.gpu, [])
        counts: dict[str, int] = {}
        for a in found:
            counts[a.severity] = counts.get(a.severity, 0) + 1
        verdict = judge(r.sample_ts, found, at, stale_after)
        age = verdict.sample_age_seconds
        out.append(GpuNow(**{f: getattr(r, f) for f in _ROW_FIELDS}, health=verdict.health,
                          reasons=verdict.reasons, open_anomalies=counts, sample_age_seconds=age,
                          fresh=age is not None and age <= stale_after.total_seconds()))
    return out


@dataclass(slots=True)
class NodeNow:
    node: str
    gpus: list[GpuNow]

    @property
    def last_seen(self) -> datetime:
        return max(g.last_seen for g in self.gpus)

    @property
    def models(self) -> list[str]:
        return sorted({g.model for g in self.gpus if g.model})

    def health_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g.health] = counts.get(g.health, 0) + 1
        return counts

    def open_anomalies(self) -> dict[str, int]:
        """Open anomalies per severity, summed over the node's GPUs (the same counts as ``/gpus``)."""
        counts: dict[str, int] = {}
        for g in self.gpus:
            for severity, n in g.open_anomalies.items():
                counts[severity] = counts.get(severity, 0) + n
        return counts


def nodes(gpus: list[GpuNow]) -> list[NodeNow]:
    by_node: dict[str, list[GpuNow]] = {}
    for g in gpus:
        by_node.setdefault(g.node, []).append(g)
    return [NodeNow(n, gs) for n, gs in sorted(by_node.items())]


@dataclass(slots=True)
class ServiceNow:
    namespace: str | None
    service: str
    pods: set[str] = field(default_factory=set)
    gpus: dict[str, GpuNow] = field(default_factory=dict)


def services(gpus: list[GpuNow], who: Principal) -> list[ServiceNow]:
    """Services holding GPUs now (the newest sample is fresh), each with its pods and GPUs."""
    found: dict[tuple[str | None, str], ServiceNow] = {}
    for g in gpus:
        if not g.fresh:
            continue
        for h in g.holders:
            if h.service is None or not who.sees_namespace(h.namespace):
                continue
            svc = found.setdefault((h.namespace, h.service), ServiceNow(h.namespace, h.service))
            if h.pod is not None:
                svc.pods.add(h.pod)
            svc.gpus[g.gpu] = g
    return [found[k] for k in sorted(found, key=lambda k: (k[0] or "", k[1]))]
