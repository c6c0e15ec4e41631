"""Fills the service usage tables (migration 0031) from the 1-minute rollups.

Why here and on a timer: service history must answer a day of a 512-GPU service in well
under 100 ms, which the join of ``process_samples_1m`` with ``gpu_samples_1m`` at
request time cannot (seconds). Each :meth:`UsageRollup.refresh` recomputes the minutes
from ``lookback`` ago up to the last complete minute (pod minutes, then service minutes
and the pod hours that overlap them), deleting and re-inserting them in one transaction,
so late data inside the lookback is folded in; data that arrives later than that does
not reach service history (the GPU views still show it). On the plain profile the source
rollups are filled by ``Store.maintain``; on TimescaleDB they are real-time continuous
aggregates. A transaction-scoped advisory lock keeps concurrent refreshes (several
collector replicas) from doubling rows: the later one skips.

GPU-seconds per row: 60 s times the share of the GPU's samples in that minute that
listed the pod (at most 60 s), summed over the pod's GPUs; energy: the same seconds
times the GPU's average power; SM/tensor active: weighted by the same seconds.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.periodic import every
from collector.store.schema import ORIGIN_SQL, ROLLUP_1H_RETENTION, ROLLUP_1M_RETENTION

log = logging.getLogger(__name__)

LOCK_KEY: Final = int.from_bytes(b"gwsvcuse", "big") & 0x7FFF_FFFF_FFFF_FFFF
_SECONDS: Final = "(60.0 * LEAST(1.0, p.samples::double precision / NULLIF(g.samples, 0)))"

#: Columns summed when rolling pod minutes up to service minutes or pod hours.
_SUMS: Final = ("gpu_minutes", "gpu_seconds", "sm_active_weighted", "sm_active_weight", "tensor_active_weighted",
                "tensor_active_weight", "memory_mib", "energy_j")
_TABLES: Final = ("service_pod_usage_1m", "service_usage_1m", "service_pod_usage_1h")

_INSERT_POD_1M: Final = (
    f"INSERT INTO service_pod_usage_1m (bucket, namespace, service, pod, {', '.join(_SUMS)})\n"
    "SELECT p.bucket, p.namespace, p.service, p.pod, count(*),"
    f" COALESCE(sum({_SECONDS}), 0),\n"
    f" COALESCE(sum({_SECONDS} * g.dcgm_fi_prof_sm_active), 0),"
    f" COALESCE(sum(CASE WHEN g.dcgm_fi_prof_sm_active IS NOT NULL THEN {_SECONDS} END), 0),\n"
    f" COALESCE(sum({_SECONDS} * g.dcgm_fi_prof_pipe_tensor_active), 0),"
    f" COALESCE(sum(CASE WHEN g.dcgm_fi_prof_pipe_tensor_active IS NOT NULL THEN {_SECONDS} END), 0),\n"
    " sum(p.used_memory_mib),"
    f" COALESCE(sum({_SECONDS} * g.dcgm_fi_dev_power_usage), 0)\n"
    "FROM process_samples_1m p JOIN gpu_samples_1m g ON g.gpu = p.gpu AND g.bucket = p.bucket\n"
    "WHERE p.bucket >= $1 AND p.bucket < $2 AND p.service IS NOT NULL\n"
    "GROUP BY p.bucket, p.namespace, p.service, p.pod"
)
_INSERT_SVC_1M: Final = (
    f"INSERT INTO service_usage_1m (bucket, namespace, service, {', '.join(_SUMS)})\n"
    f"SELECT bucket, namespace, service, {', '.join(f'sum({c})' for c in _SUMS)}\n"
    "FROM service_pod_usage_1m WHERE bucket >= $1 AND bucket < $2 GROUP BY bucket, namespace, service"
)
_INSERT_POD_1H: Final = (
    f"INSERT INTO service_pod_usage_1h (bucket, namespace, service, pod, {', '.join(_SUMS)})\n"
    f"SELECT date_bin(interval '1 hour', bucket, {ORIGIN_SQL}), namespace, service, pod,"
    f" {', '.join(f'sum({c})' for c in _SUMS)}\n"
    "FROM service_pod_usage_1m WHERE bucket >= $1 AND bucket < $2 GROUP BY 1, namespace, service, pod"
)


def _minute(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def _hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


async def refresh(conn: Any, now: datetime, lookback: timedelta = timedelta(hours=1)) -> int | None:
    """Recompute ``[now - lookback, last complete minute)`` (and the hours that overlap it);
    pod-minute rows written, or None when another refresh holds the lock."""
    until = _minute(now)
    since = _minute(now - lookback)
    hour_from, hour_to = _hour(since), _hour(until) + timedelta(hours=1)
    async with conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", LOCK_KEY):
            return None
        for table in _TABLES[:2]:
            await conn.execute(f"DELETE FROM {table} WHERE bucket >= $1 AND bucket < $2", since, until)
        status = await conn.execute(_INSERT_POD_1M, since, until)
        await conn.execute(_INSERT_SVC_1M, since, until)
        await conn.execute("DELETE FROM service_pod_usage_1h WHERE bucket >= $1 AND bucket < $2", hour_from, hour_to)
        await conn.execute(_INSERT_POD_1H, hour_from, hour_to)
        for table, keep in zip(_TABLES, (ROLLUP_1M_RETENTION, ROLLUP_1M_RETENTION, ROLLUP_1H_RETENTION),
                               strict=True):
            await conn.execute(f"DELETE FROM {table} WHERE bucket < $1", now - keep)
    return int(status.split()[-1])


async def rebuild(conn: Any, start: datetime, end: datetime, chunk: timedelta = timedelta(hours=6)) -> int:
    """Recompute a whole range (first start, or after late data older than the lookback)."""
    total = 0
    t = _minute(start)
    while t < end:
        upto = min(end, t + chunk)
        written = await refresh(conn, upto, lookback=upto - t)
        total += written or 0
        t = upto
    return total


class UsageRollup:
    """Refreshes ``service_usage_1m`` every ``interval`` seconds until stopped."""

    def __init__(self, pool: Any, interval: float = 60.0, lookback: timedelta = timedelta(hours=1)) -> None:
        self.pool = pool
        self.interval = interval
        self.lookback = lookback
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def run_once(self, now: datetime | None = None) -> int | None:
        async with self.pool.acquire() as conn:
            return await refresh(conn, now or datetime.now(UTC), self.lookback)

    async def _loop(self) -> None:
        await every(self.interval, self._stop, self.run_once, "service usage rollup")

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
