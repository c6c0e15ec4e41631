"""Per-service GPU history and cost, read from the service usage tables
(:mod:`collector.store.usage`).

Per step (and per pod, and in total over the whole range), each figure saying what it
averages over:

* ``gpu_seconds``: the seconds GPUs were held (each sample counts for the time until
  the GPU's next one), summed over GPUs; ``running_seconds``: the seconds in which at
  least one GPU was held;
* ``gpus_window_avg``: GPU-seconds divided by the period (the step for steps, the whole
  range for pods and the total), so a pod that held one GPU for an hour of a day reads
  0.04; ``gpus_while_running``: GPU-seconds divided by running seconds (that pod: 1.0);
* SM active, tensor active: the GPUs' readings weighted by GPU-seconds held;
* ``memory_used_mib_while_running``: all of the processes' memory on all the GPUs held,
  averaged over the running seconds (a pod of two processes shows both);
* energy: the GPUs' power times the seconds held (kWh); a GPU shared by pods is not
  split, each pays for its own time on it;
* cost: GPU-seconds / 3600 times the configured price per GPU-hour.

Every step of the range is answered; a step without any row is all nulls (no data is
not zero use), so charts show a gap. The steps and the grand total come from service
minutes (``GROUPING SETS``: one scan of 1,440 rows for a day); per-pod totals from pod
hours for the whole hours of the range and pod minutes for its ragged edges, so a day
costs ~24 rows per pod, not 1,440. Steps must be whole minutes. A namespace-scoped
caller reads only rows of its namespaces, so neither steps nor totals include anything
else, and a service it cannot see is unknown to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.api.principal import Principal
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
ORIGIN: Final = datetime(2000, 1, 1, tzinfo=UTC)
HOUR: Final = timedelta(hours=1)
JOULES_PER_KWH: Final = 3_600_000.0


@dataclass(slots=True)
class Usage:
    gpu_seconds: float | None
    running_seconds: float | None
    gpus_window_avg: float | None
    gpus_while_running: float | None
    sm_active: float | None
    tensor_active: float | None
    memory_used_mib_while_running: float | None
    energy_kwh: float | None
    cost: float | None


EMPTY: Final = Usage(None, None, None, None, None, None, None, None, None)


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
    range_seconds: float
    steps: list[StepUsage] = field(default_factory=list)
    pods: list[PodUsage] = field(default_factory=list)
    total: Usage = field(default_factory=lambda: Usage(0.0, 0.0, 0.0, None, None, None, None, 0.0, 0.0))


_EXISTS: Final = {
    (scoped, by_ns): (
        "SELECT EXISTS (SELECT 1 FROM service_pod_usage_1h WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
        " OR EXISTS (SELECT 1 FROM service_pod_usage_1m WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
        " OR EXISTS (SELECT 1 FROM process_samples_1m WHERE service = $1" + _filters(scoped, by_ns, 2) + ")"
    )
    for scoped in (False, True) for by_ns in (False, True)
}


async def service_known(db: Any, who: Principal, service: str, namespace: str | None) -> bool:
    """Whether ``service`` (of ``namespace``) has ever held a GPU in data ``who`` may see."""
    extra: list[Any] = [namespace] if namespace is not None else []
    if who.scoped:
        extra.append(who.scope_param())
    return bool(await db.fetchval(_EXISTS[(who.scoped, namespace is not None)], service, *extra))


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
    range_s = (end - s0).total_seconds()
    out = History(service, range_s)
    by_t: dict[datetime, Usage] = {}
    for r in step_rows:
        if r["t"] is None:
            out.total = _usage(r, range_s, price_per_gpu_hour)
        else:
            by_t[r["t"]] = _usage(r, step_s, price_per_gpu_hour)
    t = s0
    while t < end:
        out.steps.append(StepUsage(**_fields(by_t.get(t, EMPTY)), t=t))
        t += step
    for r in pod_rows:
        out.pods.append(PodUsage(**_fields(_usage(r, range_s, price_per_gpu_hour)),
                                 namespace=r["namespace"], pod=r["pod"]))
    return out


def _usage(r: Any, period_s: float, price: float) -> Usage:
    """One result row as usage over a period of ``period_s`` seconds."""
    secs = float(r["gpu_seconds"] or 0.0)
    running = float(r["running_seconds"] or 0.0)
    mem = r["memory_mib_seconds"]
    return Usage(
        gpu_seconds=secs, running_seconds=running, gpus_window_avg=secs / period_s,
        gpus_while_running=secs / running if running else None,
        sm_active=r["sm_active"], tensor_active=r["tensor_active"],
        memory_used_mib_while_running=float(mem) / running if mem is not None and running else None,
        energy_kwh=float(r["energy_j"] or 0.0) / JOULES_PER_KWH, cost=secs / 3600.0 * price,
    )


def _fields(u: Usage) -> dict[str, Any]:
    return {name: getattr(u, name) for name in Usage.__slots__}
