"""The fleet now, as the API reads it: per GPU its inventory row, newest sample and that
sample's processes, for everyone or for namespace-scoped callers.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
:mod:`collector.api.fleet` picks the metrics and judges health; this module only reads.
With ``scope`` (a scoped caller's namespaces) a GPU is listed only when its newest sample
lists a process of those namespaces, and only those processes are its holders. A GPU's
index is its position by PCI bus id among its node's GPUs (MIG instances take their
parent's), derived here because the inventory keeps the bus id, not the index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from collector.store.schema import BY_KEY


@dataclass(frozen=True, slots=True)
class Holder:
    """One process of a GPU's newest sample."""

    namespace: str | None
    pod: str | None
    service: str | None
    container: str | None
    used_memory_mib: float | None


@dataclass(frozen=True, slots=True)
class GpuNowRow:
    """One GPU's inventory row, its newest sample (``metrics`` by catalog key, nulls left out)
    and that sample's holders in pid order."""

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
    gpu_index: int | None
    holders: tuple[Holder, ...]


@cache
def fleet_sql(metrics: tuple[str, ...], scoped: bool, by_node: bool) -> str:
    """Parameters: $1 scope (when scoped), then the node (when by node)."""
    cols_ = [BY_KEY[k] for k in metrics]
    cols = ", ".join(c.name for c in cols_)
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
        f" i.first_seen, i.last_seen, s.ts AS sample_ts, {', '.join('s.' + c.name for c in cols_)},\n"
        " CASE WHEN i.pci_bus_id IS NOT NULL THEN (SELECT count(DISTINCT j.pci_bus_id) FROM gpu_inventory j"
        "  WHERE j.node = i.node AND j.pci_bus_id < i.pci_bus_id) END AS gpu_index,\n"
        " (SELECT jsonb_agg(jsonb_build_object('namespace', p.namespace, 'pod', p.pod, 'service', p.service,"
        " 'container', p.container, 'used_memory_mib', p.used_memory_mib) ORDER BY p.pid)"
        f"  FROM process_samples p WHERE p.gpu = i.gpu AND p.ts = s.ts{scope_p}) AS holders\n"
        "FROM gpu_inventory i\n"
        f"LEFT JOIN LATERAL (SELECT ts, {cols} FROM gpu_samples WHERE gpu = i.gpu AND ts <= i.last_seen"
        " ORDER BY ts DESC LIMIT 1) s ON true\n"
        + (f"WHERE {' AND '.join(where)}\n" if where else "")
        + "ORDER BY i.node, i.gpu"
    )


async def gpus_now(
    db: Any, metrics: Sequence[str], *, node: str | None = None, scope: Sequence[str] | None = None,
) -> list[GpuNowRow]:
    """Every GPU (of ``node`` unless None) in node and GPU order, ``metrics`` (catalog keys) of
    its newest sample; with ``scope`` (namespaces), only GPUs and holders of those namespaces."""
    keys = tuple(metrics)
    args: list[Any] = []
    if scope is not None:
        args.append(list(scope))
    if node is not None:
        args.append(node)
    rows = await db.fetch(fleet_sql(keys, scope is not None, node is not None), *args)
    cols = [BY_KEY[k] for k in keys]
    return [
        GpuNowRow(
            gpu=r["gpu"], node=r["node"], model=r["model"], driver_version=r["driver_version"],
            pci_bus_id=r["pci_bus_id"], mig_profile=r["mig_profile"], parent_gpu=r["parent_gpu"],
            first_seen=r["first_seen"], last_seen=r["last_seen"], sample_ts=r["sample_ts"],
            metrics={c.key: r[c.name] for c in cols if r[c.name] is not None},
            gpu_index=r["gpu_index"],
            holders=tuple(Holder(**h) for h in json.loads(r["holders"])) if r["holders"] is not None else (),
        )
        for r in rows
    ]
