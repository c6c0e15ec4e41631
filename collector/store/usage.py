"""Fills the service usage tables (migrations 0031, 0032) from raw samples.

Why in the store, run by :meth:`Store.refresh_usage <collector.store.Store.refresh_usage>`: the
collector's background loop refreshes it every minute next to maintenance, so service history
stays fresh with the API off (it once ran inside the API server). Why on a timer: service
history must answer a day of a 512-GPU service in well under 100 ms, which joining process and
GPU samples at request time cannot. Each :func:`refresh` computes the minutes that changed:
those of the last ``lookback`` (6 h) whose GPU sample count in ``gpu_samples_1m`` differs from
the count recorded when they were last computed (``service_usage_minutes``), so the newest
minute and late data from an agent's spool are both picked up, and the minutes that did not
change cost one indexed count. Changed minutes (and the minute before each, whose last sample's
length depends on them) are deleted and computed again in one transaction, then the service
minutes and the pod hours that overlap them. On the plain profile ``gpu_samples_1m`` is filled
by ``Store.maintain``; on TimescaleDB it is a real-time continuous aggregate. A transaction-
scoped advisory lock keeps concurrent refreshes (several collector replicas) from doubling
rows: the later one skips.

GPU-seconds are the seconds a GPU was held: each GPU sample stands for the time until
that GPU's next sample, at most :data:`MAX_SAMPLE_GAP` (30 s, when the detectors call a
silent GPU lost); the last sample before a longer silence stands for the time since the
one before it, and a sample with no neighbour within 30 s for nothing. A pod holds the
GPU for a sample's time when the sample lists one of its processes, so a 2-second run
is billed about 2 s, not the minute. Per pod and minute: ``gpu_seconds`` sums that over
the pod's GPUs; ``running_seconds`` is its longest-held GPU's (the seconds in which it
held at least one); ``memory_mib_seconds`` sums, per sample, all of the pod's processes'
memory on the GPU, times the sample's time; energy is the GPU's power times the same
seconds; SM/tensor active are weighted by them. Service minutes sum pods (their
``running_seconds``: the longest-running pod's); pod hours sum minutes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.store.schema import BY_KEY, ORIGIN_SQL, ROLLUP_1H_RETENTION, ROLLUP_1M_RETENTION
from telemetry.keys import PIPE_TENSOR_ACTIVE, POWER_USAGE, SM_ACTIVE

LOCK_KEY: Final = int.from_bytes(b"gwsvcuse", "big") & 0x7FFF_FFFF_FFFF_FFFF
MAX_SAMPLE_GAP: Final = timedelta(seconds=30)
MINUTE: Final = timedelta(minutes=1)
HOUR: Final = timedelta(hours=1)
#: Most minutes one statement computes (bounds the window sort of a rebuild).
_CHUNK: Final = timedelta(hours=1)

#: Columns summed when rolling pod minutes up to service minutes or pod hours
#: (gpu_minutes and memory_mib, in MiB-minutes, for queries written against migration 0031).
_SUMS: Final = ("gpu_seconds", "sm_active_weighted", "sm_active_weight", "tensor_active_weighted",
                "tensor_active_weight", "memory_mib_seconds", "energy_j", "gpu_minutes", "memory_mib")
_COLUMNS: Final = ", ".join((*_SUMS, "running_seconds"))
_TABLES: Final = ("service_pod_usage_1m", "service_usage_1m", "service_pod_usage_1h", "service_usage_minutes")

# $1 first minute, $2 end (exclusive), $3 MAX_SAMPLE_GAP. Samples up to one gap outside
# [$1, $2) are read so that the first and last samples inside know their neighbours.
_INSERT_POD_1M: Final = (
    f"INSERT INTO service_pod_usage_1m (bucket, namespace, service, pod, {_COLUMNS})\n"
    "WITH g AS (\n"
    f"  SELECT gpu, ts, {BY_KEY[SM_ACTIVE].name} AS sm, {BY_KEY[PIPE_TENSOR_ACTIVE].name} AS tensor,"
    f" {BY_KEY[POWER_USAGE].name} AS power, lead(ts) OVER w - ts AS fwd, ts - lag(ts) OVER w AS back\n"
    "  FROM gpu_samples WHERE ts >= $1::timestamptz - $3::interval AND ts < $2::timestamptz + $3::interval\n"
    "  WINDOW w AS (PARTITION BY gpu ORDER BY ts)\n"
    "), d AS (\n"
    "  SELECT gpu, ts, sm, tensor, power, extract(epoch FROM CASE WHEN fwd <= $3::interval THEN fwd"
    " WHEN back <= $3::interval THEN back ELSE interval '0' END)::float8 AS secs\n"
    "  FROM g WHERE ts >= $1 AND ts < $2\n"
    "), p AS (\n"
    "  SELECT gpu, ts, namespace, service, pod, sum(used_memory_mib) AS mem FROM process_samples\n"
    "  WHERE ts >= $1 AND ts < $2 AND service IS NOT NULL GROUP BY gpu, ts, namespace, service, pod\n"
    "), held AS (\n"
    f"  SELECT date_bin(interval '1 minute', p.ts, {ORIGIN_SQL}) AS bucket, p.namespace, p.service, p.pod, p.gpu,"
    " sum(d.secs) AS secs,\n"
    "   sum(d.secs * d.sm) AS smw, sum(d.secs) FILTER (WHERE d.sm IS NOT NULL) AS smn,\n"
    "   sum(d.secs * d.tensor) AS tw, sum(d.secs) FILTER (WHERE d.tensor IS NOT NULL) AS tn,\n"
    "   sum(d.secs * p.mem) AS mem, sum(d.secs * d.power) AS energy\n"
    "  FROM p JOIN d ON d.gpu = p.gpu AND d.ts = p.ts GROUP BY 1, 2, 3, 4, 5\n"
    ")\n"
    "SELECT bucket, namespace, service, pod, sum(secs), COALESCE(sum(smw), 0), COALESCE(sum(smn), 0),"
    " COALESCE(sum(tw), 0), COALESCE(sum(tn), 0), sum(mem), COALESCE(sum(energy), 0), count(*), sum(mem) / 60,"
    " LEAST(60, max(secs))\n"
    "FROM held GROUP BY bucket, namespace, service, pod"
)
_INSERT_SVC_1M: Final = (
    f"INSERT INTO service_usage_1m (bucket, namespace, service, {_COLUMNS})\n"
    f"SELECT bucket, namespace, service, {', '.join(f'sum({c})' for c in _SUMS)}, max(running_seconds)\n"
    "FROM service_pod_usage_1m WHERE bucket >= $1 AND bucket < $2 GROUP BY bucket, namespace, service"
)
_INSERT_POD_1H: Final = (
    f"INSERT INTO service_pod_usage_1h (bucket, namespace, service, pod, {_COLUMNS})\n"
    f"SELECT date_bin(interval '1 hour', bucket, {ORIGIN_SQL}), namespace, service, pod,"
    f" {', '.join(f'sum({c})' for c in _SUMS)}, sum(running_seconds)\n"
    "FROM service_pod_usage_1m WHERE bucket >= $1 AND bucket < $2 GROUP BY 1, namespace, service, pod"
)
_COUNTS: Final = (
    "SELECT bucket, sum(samples)::bigint AS n FROM gpu_samples_1m WHERE bucket >= $1 AND bucket < $2 GROUP BY bucket"
)
_RECORD: Final = (
    "INSERT INTO service_usage_minutes (bucket, gpu_samples) SELECT * FROM unnest($1::timestamptz[], $2::bigint[])"
    " ON CONFLICT (bucket) DO UPDATE SET gpu_samples = EXCLUDED.gpu_samples"
)


def _floor(ts: datetime, width: timedelta) -> datetime:
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    return origin + (ts - origin) // width * width


def _runs(stamps: Iterable[datetime], width: timedelta, most: timedelta) -> list[tuple[datetime, datetime]]:
    """Contiguous runs ``[lo, hi)`` of bucket starts ``width`` apart, each at most ``most`` long."""
    ordered = sorted(set(stamps))
    out: list[tuple[datetime, datetime]] = []
    for _, group in itertools.groupby(enumerate(ordered), key=lambda p: p[1] - p[0] * width):
        items = [t for _, t in group]
        lo, hi = items[0], items[-1] + width
        while lo < hi:
            out.append((lo, min(hi, lo + most)))
            lo = min(hi, lo + most)
    return out


async def _compute(conn: Any, minutes: set[datetime], counts: dict[datetime, int]) -> int:
    """Delete and compute again ``minutes`` (and the pod hours that overlap them)."""
    written = 0
    for lo, hi in _runs(minutes, MINUTE, _CHUNK):
        for table in _TABLES[:2]:
            await conn.execute(f"DELETE FROM {table} WHERE bucket >= $1 AND bucket < $2", lo, hi)
        status = await conn.execute(_INSERT_POD_1M, lo, hi, MAX_SAMPLE_GAP)
        written += int(status.split()[-1])
        await conn.execute(_INSERT_SVC_1M, lo, hi)
    for lo, hi in _runs({_floor(m, HOUR) for m in minutes}, HOUR, timedelta(days=1)):
        await conn.execute("DELETE FROM service_pod_usage_1h WHERE bucket >= $1 AND bucket < $2", lo, hi)
        await conn.execute(_INSERT_POD_1H, lo, hi)
    done = sorted(minutes)
    await conn.execute("DELETE FROM service_usage_minutes WHERE bucket = ANY($1::timestamptz[])",
                       [m for m in done if m not in counts])
    await conn.execute(_RECORD, [m for m in done if m in counts], [counts[m] for m in done if m in counts])
    return written


async def _retention(conn: Any, now: datetime) -> None:
    for table, keep in zip(_TABLES, (ROLLUP_1M_RETENTION, ROLLUP_1M_RETENTION, ROLLUP_1H_RETENTION,
                                     ROLLUP_1M_RETENTION), strict=True):
        await conn.execute(f"DELETE FROM {table} WHERE bucket < $1", now - keep)


async def refresh(conn: Any, now: datetime, lookback: timedelta = timedelta(hours=6)) -> int | None:
    """Compute the minutes of ``[now - lookback, last complete minute)`` whose data changed;
    pod-minute rows written, or None when another refresh holds the lock."""
    until = _floor(now, MINUTE)
    since = _floor(now - lookback, MINUTE)
    async with conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", LOCK_KEY):
            return None
        counts = {r["bucket"]: int(r["n"]) for r in await conn.fetch(_COUNTS, since, until)}
        seen = {r["bucket"]: int(r["gpu_samples"]) for r in await conn.fetch(
            "SELECT bucket, gpu_samples FROM service_usage_minutes WHERE bucket >= $1 AND bucket < $2", since, until)}
        changed = {m for m, n in counts.items() if seen.get(m) != n} | (seen.keys() - counts.keys())
        changed |= {m - MINUTE for m in changed if m - MINUTE >= since}
        written = await _compute(conn, changed, counts) if changed else 0
        await _retention(conn, now)
    return written


async def rebuild(conn: Any, start: datetime, end: datetime) -> int:
    """Compute every minute of ``[start, end)`` again, changed or not (first start, tests,
    or after data older than the lookback arrived)."""
    since, until = _floor(start, MINUTE), _floor(end, MINUTE)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        counts = {r["bucket"]: int(r["n"]) for r in await conn.fetch(_COUNTS, since, until)}
        minutes = {since + i * MINUTE for i in range(int((until - since) / MINUTE))}
        return await _compute(conn, minutes, counts) if minutes else 0
