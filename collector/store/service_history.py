"""Reads of the service usage tables (filled by :mod:`collector.store.usage`): a service's
sums per step and in total, per pod, and whether it is known at all.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
:mod:`collector.api.history` turns the sums into averages, energy and cost. The steps and
the grand total come from service minutes (``GROUPING SETS``: one scan of 1,440 rows for a
day); per-pod totals from pod hours for the whole hours of the range and pod minutes for
its ragged edges. ``namespace`` narrows to one namespace; ``scope`` (a scoped caller's
namespaces) keeps only rows of those namespaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from collector.store.schema import ORIGIN_SQL

_SUMS: Final = (
    " sum(gpu_seconds) AS gpu_seconds, sum(running_seconds) AS running_seconds,\n"
    " sum(sm_active_weighted) / NULLIF(sum(sm_active_weight), 0) AS sm_active,\n"
    " sum(tensor_active_weighted) / NULLIF(sum(tensor_active_weight), 0) AS tensor_active,\n"
    " sum(memory_mib_seconds) AS memory_mib_seconds, sum(energy_j) AS energy_j\n"
)


def _filters(scoped: bool, by_namespace: bool, first: int) -> str:
    """Namespace filters after ``first - 1`` other parameters."""
    out = ""
    if by_namespace:
        out += f" AND namespace = ${first}"
        first += 1
    if scoped:
        out += f" AND namespace = ANY(${first}::text[])"
    return out


def _steps_sql(scoped: bool, by_namespace: bool) -> str:
    """Steps and the grand total, from service minutes ($1 service, $2 start, $3 end, $4 step)."""
    return (
        f"SELECT date_bin($4::interval, bucket, {ORIGIN_SQL}) AS t,\n{_SUMS}"
        f"FROM service_usage_1m WHERE service = $1 AND bucket >= $2 AND bucket < $3"
        f"{_filters(scoped, by_namespace, 5)}\n"
        "GROUP BY GROUPING SETS ((1), ()) ORDER BY 1 NULLS FIRST"
    )


def _pods_sql(scoped: bool, by_namespace: bool) -> str:
    """Per-pod totals: whole hours [$4, $5) from pod hours, the edges [$2, $4) and [$5, $3) from
    pod minutes ($1 service)."""
    f = _filters(scoped, by_namespace, 6)
    return (
        f"SELECT namespace, pod,\n{_SUMS}FROM (\n"
        "  SELECT * FROM service_pod_usage_1h WHERE service = $1 AND bucket >= $4 AND bucket < $5" + f + "\n"
        "  UNION ALL\n"
        "  SELECT * FROM service_pod_usage_1m WHERE service = $1"
        " AND ((bucket >= $2 AND bucket < $4) OR (bucket >= $5 AND bucket < $3))" + f + "\n"
        ") u GROUP BY namespace, pod ORDER BY namespace, pod"
    )


_STEPS: Final = {(s, n): _steps_sql(s, n) for s in (False, True) for n in (False, True)}
_PODS: Final = {(s, n): _pods_sql(s, n) for s in (False, True) for n in (False, True)}
_EXISTS: Final = {
    (scoped, by_ns): (
        "SELECT EXISTS (SELECT 1 FROM service_pod_usage_1h WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
        " OR EXISTS (SELECT 1 FROM service_pod_usage_1m WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
        " OR EXISTS (SELECT 1 FROM process_samples_1m WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
    )
    for scoped in (False, True) for by_ns in (False, True)
}


@dataclass(frozen=True, slots=True)
class UsageSums:
    """Sums over some rows of a usage table; None where no row had a value."""

    gpu_seconds: float | None
    running_seconds: float | None
    sm_active: float | None  # weighted by GPU-seconds
    tensor_active: float | None  # weighted by GPU-seconds
    memory_mib_seconds: float | None
    energy_j: float | None


@dataclass(frozen=True, slots=True)
class StepSums:
    """The sums of one step (starting at ``t``), or of the whole range (``t`` None)."""

    t: datetime | None
    sums: UsageSums


@dataclass(frozen=True, slots=True)
class PodSums:
    """The sums of one pod over the whole range."""

    namespace: str | None
    pod: str | None
    sums: UsageSums


def _sums(r: Any) -> UsageSums:
    return UsageSums(r["gpu_seconds"], r["running_seconds"], r["sm_active"], r["tensor_active"],
                     r["memory_mib_seconds"], r["energy_j"])


def _args(namespace: str | None, scope: Sequence[str] | None) -> tuple[tuple[bool, bool], list[Any]]:
    extra: list[Any] = []
    if namespace is not None:
        extra.append(namespace)
    if scope is not None:
        extra.append(list(scope))
    return (scope is not None, namespace is not None), extra


async def service_known(db: Any, service: str, namespace: str | None, scope: Sequence[str] | None = None) -> bool:
    """Whether ``service`` (of ``namespace``, unless None) has ever held a GPU in rows of ``scope``."""
    key, extra = _args(namespace, scope)
    return bool(await db.fetchval(_EXISTS[key], service, *extra))


async def step_sums(
    db: Any, service: str, start: datetime, end: datetime, step: timedelta, *,
    namespace: str | None, scope: Sequence[str] | None = None,
) -> list[StepSums]:
    """The grand total first (``t`` None), then the steps that have rows, in time order
    (``date_bin`` on the rollups' origin; ``step`` whole minutes)."""
    key, extra = _args(namespace, scope)
    rows = await db.fetch(_STEPS[key], service, start, end, step, *extra)
    return [StepSums(r["t"], _sums(r)) for r in rows]


async def pod_sums(
    db: Any, service: str, start: datetime, end: datetime, hours_from: datetime, hours_to: datetime, *,
    namespace: str | None, scope: Sequence[str] | None = None,
) -> list[PodSums]:
    """Per pod over [start, end): pod hours for [hours_from, hours_to), pod minutes for the rest."""
    key, extra = _args(namespace, scope)
    rows = await db.fetch(_PODS[key], service, start, end, hours_from, hours_to, *extra)
    return [PodSums(r["namespace"], r["pod"], _sums(r)) for r in rows]
