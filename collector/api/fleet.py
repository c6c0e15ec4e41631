"""The fleet now: each GPU's newest sample, the pods on it, its health; nodes and services.

Why one query for all three views: ``/gpus``, ``/nodes`` and ``/services`` are views of
the same snapshot (per GPU, its newest sample and that sample's processes), and building
nodes and services from the GPU rows the caller may see means a namespace-scoped token
can never count a GPU it may not see. Health is judged from the newest sample: stale when
the GPU has not reported for :data:`STALE_AFTER`; critical on an uncorrectable ECC error
or an XID that means the GPU needs attention; degraded while a hardware slowdown,
thermal or power-brake clock event is active; else ok.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import asyncpg

from collector.api.principal import Principal
from collector.store.schema import BY_KEY

STALE_AFTER: Final = timedelta(minutes=5)

#: The metrics shown for each GPU in the fleet view (catalog keys).
FLEET_METRICS: Final[tuple[str, ...]] = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
)
_COLS: Final = [BY_KEY[k] for k in FLEET_METRICS]

#: Clock event reasons that mean the GPU is being slowed down by hardware or heat.
_SLOWDOWN_BITS: Final = {0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                         0x40: "hardware thermal slowdown", 0x80: "power brake"}
#: XIDs after which the GPU needs attention (NVIDIA's XID catalog: reset or drain).
_CRITICAL_XIDS: Final = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})


@dataclass(slots=True)
class Holder:
    namespace: str | None
    pod: str | None
    service: str | None
    container: str | None
    used_memory_mib: float | None


@dataclass(slots=True)
class GpuNow:
    gpu: str
    node: str
    model: str | None
    driver_version: str | None
    pci_bus_id: str | None
    mig_profile: str | None
    parent_gpu: str | None
    first_seen: datetime
    last_seen: datetime
    sample_ts: datetime | None
    metrics: dict[str, float | int]
    holders: list[Holder] = field(default_factory=list)
    health: str = "ok"
    reasons: list[str] = field(default_factory=list)
    open_anomalies: int = 0


def judge(gpu: GpuNow, now: datetime) -> None:
    """Set ``health`` and ``reasons`` from the newest sample."""
    reasons: list[str] = []
    status = "ok"
    m = gpu.metrics
    if now - gpu.last_seen > STALE_AFTER:
        reasons.append(f"no sample since {gpu.last_seen.isoformat()}")
        status = "stale"
    dbe = m.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    xid = int(m.get("DCGM_FI_DEV_XID_ERRORS") or 0)
    critical: list[str] = []
    if dbe:
        critical.append(f"{int(dbe)} uncorrectable ECC errors")
    if xid in _CRITICAL_XIDS:
        critical.append(f"XID {xid}")
    elif xid:
        reasons.append(f"XID {xid}")
    reasons.extend(critical)
    bits = int(m.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS") or 0)
    slow = [name for bit, name in _SLOWDOWN_BITS.items() if bits & bit]
    reasons.extend(slow)
    if status != "stale":
        status = "critical" if critical else "degraded" if (slow or xid) else "ok"
    gpu.health = status
    gpu.reasons = reasons


def _fleet_sql(scoped: bool, by_node: bool) -> str:
    cols = ", ".join(c.name for c in _COLS)
    scope_p = " AND p.namespace = ANY($1::text[])" if scoped else ""
    node_arg = "$2" if scoped else "$1"
    where: list[str] = []
    if by_node:
        where.append(f"i.node = {node_arg}")
    if scoped:
        where.append("EXISTS (SELECT 1 FROM process_samples p WHERE p.gpu = i.gpu AND p.ts = s.ts"
                     " AND p.namespace = ANY($1::text[]))")
    return (
        "SELECT i.gpu, i.node, i.model, i.driver_version, i.pci_bus_id, i.mig_profile, i.parent_gpu,"
        f" i.first_seen, i.last_seen, s.ts AS sample_ts, {', '.join('s.' + c.name for c in _COLS)},\n"
        " (SELECT jsonb_agg(jsonb_build_object('namespace', p.namespace, 'pod', p.pod, 'service', p.service,"
        " 'container', p.container, 'used_memory_mib', p.used_memory_mib) ORDER BY p.pid)"
        f"  FROM process_samples p WHERE p.gpu = i.gpu AND p.ts = s.ts{scope_p}) AS holders\n"
        "FROM gpu_inventory i\n"
        f"LEFT JOIN LATERAL (SELECT ts, {cols} FROM gpu_samples WHERE gpu = i.gpu AND ts <= i.last_seen"
        " ORDER BY ts DESC LIMIT 1) s ON true\n"
        + (f"WHERE {' AND '.join(where)}\n" if where else "")
        + "ORDER BY i.node, i.gpu"
    )


_SQL: Final = {(scoped, by_node): _fleet_sql(scoped, by_node) for scoped in (False, True) for by_node in (False, True)}


async def open_anomalies_by_gpu(db: Any, who: Principal) -> dict[str, int]:
    """Open anomalies per GPU that ``who`` may see; empty while the anomaly tables do not exist."""
    sql = "SELECT gpu, count(*) AS n FROM anomalies WHERE end_ts IS NULL AND gpu IS NOT NULL"
    args: list[Any] = []
    if who.scoped:
        sql += " AND namespace = ANY($1::text[])"
        args.append(who.scope_param())
    try:
        rows = await db.fetch(sql + " GROUP BY gpu", *args)
    except asyncpg.UndefinedTableError:
        return {}
    return {r["gpu"]: int(r["n"]) for r in rows}


async def fleet(db: Any, who: Principal, *, node: str | None = None, now: datetime | None = None) -> list[GpuNow]:
    """Every GPU ``who`` may see now (optionally of one node), newest sample and holders included."""
    args: list[Any] = []
    if who.scoped:
        args.append(who.scope_param())
    if node is not None:
        args.append(node)
    rows = await db.fetch(_SQL[(who.scoped, node is not None)], *args)
    anomalies = await open_anomalies_by_gpu(db, who)
    at = now or datetime.now(UTC)
    out: list[GpuNow] = []
    for r in rows:
        holders = [Holder(**h) for h in json.loads(r["holders"])] if r["holders"] is not None else []
        gpu = GpuNow(
            gpu=r["gpu"], node=r["node"], model=r["model"], driver_version=r["driver_version"],
            pci_bus_id=r["pci_bus_id"], mig_profile=r["mig_profile"], parent_gpu=r["parent_gpu"],
            first_seen=r["first_seen"], last_seen=r["last_seen"], sample_ts=r["sample_ts"],
            metrics={c.key: r[c.name] for c in _COLS if r[c.name] is not None},
            holders=holders, open_anomalies=anomalies.get(r["gpu"], 0),
        )
        judge(gpu, at)
        out.append(gpu)
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
        if g.health == "stale":
            continue
        for h in g.holders:
            if h.service is None or not who.sees_namespace(h.namespace):
                continue
            svc = found.setdefault((h.namespace, h.service), ServiceNow(h.namespace, h.service))
            if h.pod is not None:
                svc.pods.add(h.pod)
            svc.gpus[g.gpu] = g
    return [found[k] for k in sorted(found, key=lambda k: (k[0] or "", k[1]))]
