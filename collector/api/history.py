"""Per-service GPU history and cost, read from the service usage tables
(:mod:`collector.api.usage`).

Per step (and per pod, and in total over the whole range):

* GPU-seconds: time on GPUs, from the share of each GPU's samples that listed the pod,
  at one-minute resolution;
* gpus: the average number of GPUs held, GPU-seconds divided by the period's length (the
  step for steps, the whole range for pods and the total);
* SM active, tensor active: the GPUs' averages weighted by GPU-seconds;
* memory used: the processes' memory summed over GPUs, averaged over the period's
  minutes (steps, total) or per GPU held (pods), in MiB;
* energy: the GPUs' average power times the GPU-seconds (kWh); a GPU shared by pods is
  not split, each pays for its own time on it;
* cost: GPU-seconds / 3600 times the configured price per GPU-hour.

The steps and the grand total come from service minutes (``GROUPING SETS``: one scan of
1,440 rows for a day); per-pod totals from pod hours for the whole hours of the range
and pod minutes for its ragged edges, so a day costs ~24 rows per pod, not 1,440. Steps
must be whole minutes. A namespace-scoped caller reads only rows of its namespaces, so
neither steps nor totals include anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.api.principal import Principal
from collector.store.schema import ORIGIN_SQL

_SUMS: Final = (
    " sum(gpu_seconds) AS gpu_seconds, sum(gpu_minutes) AS gpu_minutes,\n"
    " sum(sm_active_weighted) / NULLIF(sum(sm_active_weight), 0) AS sm_active,\n"
    " sum(tensor_active_weighted) / NULLIF(sum(tensor_active_weight), 0) AS tensor_active,\n"
    " sum(memory_mib) AS memory_mib_minutes, sum(energy_j) AS energy_j\n"
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
ORIGIN: Final = datetime(2000, 1, 1, tzinfo=UTC)
HOUR: Final = timedelta(hours=1)
JOULES_PER_KWH: Final = 3_600_000.0


@dataclass(slots=True)
class Usage:
    gpu_seconds: float
    gpus: float
    sm_active: float | None
    tensor_active: float | None
    memory_used_mib: float | None
    energy_kwh: float
    cost: float


@dataclass(slots=True)
class StepUsage(Usage):
    t: datetime = datetime.min


@dataclass(slots=True)
class PodUsage(Usage):
    namespace: str | None = None
    pod: str | None = None


@dataclass(slots=True)
class History:
    service: str
    steps: list[StepUsage] = field(default_factory=list)
    pods: list[PodUsage] = field(default_factory=list)
    total: Usage = field(default_factory=lambda: Usage(0.0, 0.0, None, None, None, 0.0, 0.0))


async def service_history(
    db: Any, who: Principal, service: str, start: datetime, end: datetime, step: timedelta, *,
    namespace: str | None, price_per_gpu_hour: float,
) -> History:
    s0 = ORIGIN + (start - ORIGIN) // step * step  # the first step's start, as date_bin gives it
    h0 = ORIGIN + -((ORIGIN - s0) // HOUR) * HOUR  # first whole hour at or after s0
    h1 = max(h0, ORIGIN + (end - ORIGIN) // HOUR * HOUR)  # last whole hour boundary at or before end
    if h1 <= h0:
        h0 = h1 = end  # no whole hour inside: all from minutes
    extra: list[Any] = []
    if namespace is not None:
        extra.append(namespace)
    if who.scoped:
        extra.append(who.scope_param())
    key = (who.scoped, namespace is not None)
    step_rows = await db.fetch(_STEPS[key], service, s0, end, step, *extra)
    pod_rows = await db.fetch(_PODS[key], service, s0, end, h0, h1, *extra)
    step_s = step.total_seconds()
    range_s = max((end - s0).total_seconds(), 60.0)
    out = History(service)
    for r in step_rows:
        if r["t"] is None:
            out.total = _usage(r, range_s, price_per_gpu_hour, per_gpu_memory=False)
        else:
            out.steps.append(StepUsage(**_fields(_usage(r, step_s, price_per_gpu_hour, per_gpu_memory=False)),
                                       t=r["t"]))
    for r in pod_rows:
        out.pods.append(PodUsage(**_fields(_usage(r, range_s, price_per_gpu_hour, per_gpu_memory=True)),
                                 namespace=r["namespace"], pod=r["pod"]))
    return out


def _usage(r: Any, period_s: float, price: float, *, per_gpu_memory: bool) -> Usage:
    """One result row as usage over a period of ``period_s`` seconds."""
    secs = float(r["gpu_seconds"] or 0.0)
    mem = r["memory_mib_minutes"]
    if mem is None:
        memory = None
    elif per_gpu_memory:
        memory = mem / float(r["gpu_minutes"]) if r["gpu_minutes"] else None
    else:
        memory = mem / (period_s / 60.0)
    return Usage(
        gpu_seconds=secs, gpus=secs / period_s, sm_active=r["sm_active"], tensor_active=r["tensor_active"],
        memory_used_mib=memory, energy_kwh=float(r["energy_j"] or 0.0) / JOULES_PER_KWH, cost=secs / 3600.0 * price,
    )


def _fields(u: Usage) -> dict[str, Any]:
    return {name: getattr(u, name) for name in Usage.__slots__}
