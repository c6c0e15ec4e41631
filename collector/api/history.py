"""Per-service GPU history and cost, read from the service usage tables
(:mod:`collector.store.usage`) through :mod:`collector.store.service_history`.

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
from collector.store import service_history as store_history
from collector.store.service_history import UsageSums

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


async def service_known(db: Any, who: Principal, service: str, namespace: str | None) -> bool:
    """Whether ``service`` (of ``namespace``) has ever held a GPU in data ``who`` may see."""
    return await store_history.service_known(db, service, namespace, who.scope_param())


async def service_history(
    db: Any, who: Principal, service: str, start: datetime, end: datetime, step: timedelta, *,
    namespace: str | None, price_per_gpu_hour: float,
) -> History:
    s0 = ORIGIN + (start - ORIGIN) // step * step  # the first step's start, as date_bin gives it
    h0 = ORIGIN + -((ORIGIN - s0) // HOUR) * HOUR  # first whole hour at or after s0
    h1 = max(h0, ORIGIN + (end - ORIGIN) // HOUR * HOUR)  # last whole hour boundary at or before end
    if h1 <= h0:
        h0 = h1 = end  # no whole hour inside: all from minutes
    scope = who.scope_param()
    step_rows = await store_history.step_sums(db, service, s0, end, step, namespace=namespace, scope=scope)
    pod_rows = await store_history.pod_sums(db, service, s0, end, h0, h1, namespace=namespace, scope=scope)
    step_s = step.total_seconds()
    range_s = (end - s0).total_seconds()
    out = History(service, range_s)
    by_t: dict[datetime, Usage] = {}
    for r in step_rows:
        if r.t is None:
            out.total = _usage(r.sums, range_s, price_per_gpu_hour)
        else:
            by_t[r.t] = _usage(r.sums, step_s, price_per_gpu_hour)
    t = s0
    while t < end:
        out.steps.append(StepUsage(**_fields(by_t.get(t, EMPTY)), t=t))
        t += step
    for p in pod_rows:
        out.pods.append(PodUsage(**_fields(_usage(p.sums, range_s, price_per_gpu_hour)),
                                 namespace=p.namespace, pod=p.pod))
    return out


def _usage(r: UsageSums, period_s: float, price: float) -> Usage:
    """One row of sums as usage over a period of ``period_s`` seconds."""
    secs = float(r.gpu_seconds or 0.0)
    running = float(r.running_seconds or 0.0)
    mem = r.memory_mib_seconds
    return Usage(
        gpu_seconds=secs, running_seconds=running, gpus_window_avg=secs / period_s,
        gpus_while_running=secs / running if running else None,
        sm_active=r.sm_active, tensor_active=r.tensor_active,
        memory_used_mib_while_running=float(mem) / running if mem is not None and running else None,
        energy_kwh=float(r.energy_j or 0.0) / JOULES_PER_KWH, cost=secs / 3600.0 * price,
    )


def _fields(u: Usage) -> dict[str, Any]:
    return {name: getattr(u, name) for name in Usage.__slots__}
