"""Store housekeeping: partitions, rollups and retention (plain PostgreSQL), late rollups (TimescaleDB).

Why: without TimescaleDB nobody else creates time partitions, fills the rollups or
drops old data; ``Store.maintain()`` calls :func:`run` periodically (and ``Store.open``
calls :func:`ensure_partitions`).

* Partitions: ``gpu_samples``, ``process_samples`` and the CUPTI probe's ``kernel_windows``
  and ``kernel_stats`` (migration 0070) have one partition per UTC day, created two days
  ahead, plus a DEFAULT partition that catches any other timestamp. Creating a day whose
  rows already sit in DEFAULT (late or clock-skewed data) moves them into the new
  partition first, as PostgreSQL requires.
* Rollups: each write marks the 1-minute buckets it touched in ``rollup_pending``;
  :func:`refresh_rollups` takes the marks it can see (``DELETE ... RETURNING``, one
  snapshot, so marks committed later stay for the next run), recomputes exactly those
  minutes from raw rows with ``date_bin`` and the hours containing them from the
  1-minute rollup, in one transaction. Late data is therefore folded in whenever it
  arrives, as long as its raw rows are still kept.
* Retention: drop day partitions older than 14 days, delete older rows from DEFAULT,
  and delete rollup rows older than 90 days (1 minute) and 2 years (1 hour).

On the TimescaleDB profile its policies do all of this, except for data older than their
refresh windows (7 days; 1 hour: 8): the writer marks such buckets and
:func:`refresh_late_timescale` refreshes the continuous aggregates over them, so both
profiles fold late data in up to the raw retention.

Every step is idempotent; a session advisory lock lets one replica maintain at a time
(the others skip the round). All SQL names come from the whitelists below and from
collector.store.schema; bounds and partition names are computed from datetimes here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

import asyncpg

from collector.store import sqlgen
from collector.store.schema import (
    ORIGIN_SQL,
    RAW_RETENTION,
    ROLLUP_1H_RETENTION,
    ROLLUP_1M_RETENTION,
    process_raw_aggregates,
    quote_ident,
    raw_aggregates,
    rollup_aggregates,
)

log = logging.getLogger(__name__)

#: The partitioned raw tables (a whitelist: partition DDL is built from these names); the kernel
#: tables keep the raw samples' retention, as their data is as detailed.
PARTITIONED: Final = ("gpu_samples", "process_samples", "kernel_windows", "kernel_stats")
#: (rollup table, bucket column's retention).
ROLLUP_RETENTION: Final = (
    ("gpu_samples_1m", ROLLUP_1M_RETENTION),
    ("process_samples_1m", ROLLUP_1M_RETENTION),
    ("gpu_samples_1h", ROLLUP_1H_RETENTION),
)
MAINTAIN_LOCK_KEY: Final = int.from_bytes(b"gpuwmain", "big") & 0x7FFF_FFFF_FFFF_FFFF

#: How long partition DDL waits for its lock before giving up until the next round.
LOCK_TIMEOUT: Final = "5s"

MINUTE: Final = timedelta(minutes=1)
HOUR: Final = timedelta(hours=1)
DAY: Final = timedelta(days=1)


@dataclass(slots=True)
class MaintenanceReport:
    """What one :func:`run` did (for logs and tests)."""

    ran: bool = True
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    minutes: int = 0
    hours: int = 0


# --------------------------------------------------------------------------------------
# partitions
# --------------------------------------------------------------------------------------


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def _bounds_sql(day: date) -> str:
    lo, hi = _day_start(day), _day_start(day + DAY)
    return f"FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"


async def _create_partition(conn: asyncpg.Connection, table: str, day: date) -> bool:
    """Create ``table``'s partition for ``day`` unless it exists; True if created."""
    assert table in PARTITIONED
    name = partition_name(table, day)
    if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", name):
        return False
    lo, hi = _day_start(day), _day_start(day + DAY)
    default = quote_ident(f"{table}_default")
    async with conn.transaction():
        # Creating a partition locks the parent exclusively anyway; taking the parent's
        # lock first, then DEFAULT's, is the order writers use (no deadlock), and no row
        # for the day can land in DEFAULT between the move below and the attach. The
        # lock timeout keeps a long reader from making writers queue behind us; the
        # partition is made days ahead, so a skipped round costs nothing.
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute(f"LOCK TABLE ONLY {table} IN ACCESS EXCLUSIVE MODE")
        await conn.execute(f"LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE")
        if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", name):
            return False  # another collector made it while we waited
        stranded = await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {default} WHERE ts >= $1 AND ts < $2)", lo, hi)
        if not stranded:
            await conn.execute(f"CREATE TABLE {quote_ident(name)} PARTITION OF {table} FOR VALUES {_bounds_sql(day)}")
            return True
        await conn.execute(
            f"CREATE TABLE {quote_ident(name)} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        moved = await conn.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE ts >= $1 AND ts < $2 RETURNING *) "
            f"INSERT INTO {quote_ident(name)} SELECT * FROM moved",
            lo, hi,
        )
        await conn.execute(f"ALTER TABLE {table} ATTACH PARTITION {quote_ident(name)} FOR VALUES {_bounds_sql(day)}")
        log.info("created partition %s with %s rows moved from %s", name, moved.rsplit(" ", 1)[-1], default)
        return True


async def ensure_partitions(
    conn: asyncpg.Connection, now: datetime, *, days_back: int = 2, days_ahead: int = 2,
) -> list[str]:
    """Create the day partitions from ``now - days_back`` to ``now + days_ahead``; returns new names."""
    today = now.astimezone(UTC).date()
    created: list[str] = []
    for offset in range(-days_back, days_ahead + 1):
        day = today + timedelta(days=offset)
        for table in PARTITIONED:
            try:
                if await _create_partition(conn, table, day):
                    created.append(partition_name(table, day))
            except asyncpg.LockNotAvailableError:
                log.warning("partition %s not created this round: %s is busy", partition_name(table, day), table)
    return created


async def drop_old_partitions(conn: asyncpg.Connection, now: datetime) -> list[str]:
    """Drop day partitions entirely older than the raw retention; trim DEFAULT likewise."""
    cutoff = now - RAW_RETENTION
    dropped: list[str] = []
    for table in PARTITIONED:
        pattern = re.compile(rf"^{table}_p(\d{{8}})$")
        names = await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = $1::text::regclass ORDER BY c.relname",
            table,
        )
        for row in names:
            match = pattern.match(str(row["relname"]))
            if match is None:
                continue
            day = datetime.strptime(match.group(1), "%Y%m%d").date()
            if _day_start(day + DAY) > cutoff:
                continue
            try:
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    await conn.execute(f"DROP TABLE IF EXISTS {quote_ident(match.group(0))}")
                dropped.append(match.group(0))
            except asyncpg.LockNotAvailableError:
                log.warning("partition %s not dropped this round: %s is busy", match.group(0), table)
        await conn.execute(f"DELETE FROM {quote_ident(table + '_default')} WHERE ts < $1", cutoff)
    if dropped:
        log.info("dropped partitions past retention: %s", ", ".join(dropped))
    return dropped


# --------------------------------------------------------------------------------------
# rollups
# --------------------------------------------------------------------------------------


def _runs(buckets: Iterable[datetime], width: timedelta) -> list[tuple[datetime, datetime]]:
    """Sorted buckets -> [lo, hi) ranges of consecutive buckets."""
    runs: list[tuple[datetime, datetime]] = []
    for bucket in sorted(set(buckets)):
        if runs and runs[-1][1] == bucket:
            runs[-1] = (runs[-1][0], bucket + width)
        else:
            runs.append((bucket, bucket + width))
    return runs


def _upsert_sql(target: str, source: str, time_col: str, width: str, aggregates: list[tuple[str, str]]) -> str:
    cols = ["bucket", "gpu", *(c for c, _ in aggregates)]
    select = [f"date_bin(INTERVAL '{width}', {time_col}, {ORIGIN_SQL})", "gpu", *(e for _, e in aggregates)]
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c, _ in aggregates)
    return (
        f"INSERT INTO {target} ({', '.join(cols)})\nSELECT {', '.join(select)}\nFROM {source}\n"
        f"WHERE {time_col} >= $1 AND {time_col} < $2\nGROUP BY 1, 2\n"
        f"ON CONFLICT (bucket, gpu) DO UPDATE SET {updates}"
    )


_REFRESH_GPU_1M: Final = _upsert_sql("gpu_samples_1m", "gpu_samples", "ts", "1 minute", raw_aggregates())
_REFRESH_GPU_1H: Final = _upsert_sql("gpu_samples_1h", "gpu_samples_1m", "bucket", "1 hour", rollup_aggregates())
_PROCESS_AGGS: Final = process_raw_aggregates()
# namespace/pod/service may be NULL, so process_samples_1m has no unique key to upsert
# on: its buckets are replaced whole (the range is exactly the minutes recomputed).
_CLEAR_PROCESS_1M: Final = "DELETE FROM process_samples_1m WHERE bucket >= $1 AND bucket < $2"
_REFRESH_PROCESS_1M: Final = (
    f"INSERT INTO process_samples_1m (bucket, gpu, namespace, pod, service, {', '.join(c for c, _ in _PROCESS_AGGS)})\n"
    f"SELECT date_bin(INTERVAL '1 minute', ts, {ORIGIN_SQL}), gpu, namespace, pod, service, "
    f"{', '.join(e for _, e in _PROCESS_AGGS)}\n"
    "FROM process_samples WHERE ts >= $1 AND ts < $2\nGROUP BY 1, 2, 3, 4, 5"
)


def _floor(ts: datetime, width: timedelta) -> datetime:
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    return origin + ((ts - origin) // width) * width


async def refresh_rollups(conn: asyncpg.Connection, now: datetime) -> tuple[int, int]:
    """Recompute the rollup buckets that got data since the last run; (minutes, hours) done."""
    async with conn.transaction():
        marks = await conn.fetch("DELETE FROM rollup_pending RETURNING bucket")
        oldest = now - RAW_RETENTION
        # A mark older than the raw retention has no raw rows left to aggregate; the
        # rollup already holds what they said.
        minutes = {r["bucket"] for r in marks if r["bucket"] >= oldest}
        for lo, hi in _runs(minutes, MINUTE):
            await conn.execute(_REFRESH_GPU_1M, lo, hi)
            await conn.execute(_CLEAR_PROCESS_1M, lo, hi)
            await conn.execute(_REFRESH_PROCESS_1M, lo, hi)
        hours = {_floor(m, HOUR) for m in minutes}
        for lo, hi in _runs(hours, HOUR):
            await conn.execute(_REFRESH_GPU_1H, lo, hi)
    return len(minutes), len(hours)


async def apply_rollup_retention(conn: asyncpg.Connection, now: datetime) -> None:
    for table, keep in ROLLUP_RETENTION:
        await conn.execute(f"DELETE FROM {quote_ident(table)} WHERE bucket < $1", now - keep)


# --------------------------------------------------------------------------------------
# TimescaleDB: late data
# --------------------------------------------------------------------------------------

#: (rollup, its continuous aggregate from the cutover on, the one before it; migration 0050)
_TS_GPU_ROLLUPS: Final = (
    ("gpu_samples_1m", "gpu_samples_1m_v2", "gpu_samples_1m_v1", MINUTE),
    ("gpu_samples_1h", "gpu_samples_1h_v2", "gpu_samples_1h_v1", HOUR),
)
#: the continuous aggregates of columns added later (sqlgen's added migrations), joined into the same views
_TS_ADDED: Final = sqlgen.added_aggregates()
_TS_PROCESS_ROLLUP: Final = "process_samples_1m"
_TS_MARKS_PER_ROUND: Final = 50_000


def _refresh_sql(view: str) -> str:
    assert view in {v for _, new, old, _ in _TS_GPU_ROLLUPS for v in (new, old)} | {_TS_PROCESS_ROLLUP} | {
        added for _, added, _ in _TS_ADDED}
    return f"CALL refresh_continuous_aggregate('{view}', $1::timestamptz, $2::timestamptz)"


def _ceil(ts: datetime, width: timedelta) -> datetime:
    floor = _floor(ts, width)
    return floor if floor == ts else floor + width


async def _refresh(conn: asyncpg.Connection, new: str, old: str, cutover: datetime | None,
                   lo: datetime, hi: datetime) -> None:
    """Refresh [lo, hi): the cutover's new aggregate from it on, the old one before it."""
    if cutover is None or lo >= cutover:
        await conn.execute(_refresh_sql(new), lo, hi)
    elif hi <= cutover:
        await conn.execute(_refresh_sql(old), lo, hi)
    else:
        await conn.execute(_refresh_sql(old), lo, cutover)
        await conn.execute(_refresh_sql(new), cutover, hi)


async def refresh_late_timescale(conn: asyncpg.Connection, now: datetime) -> tuple[int, int]:
    """Refresh the continuous aggregates over the marked buckets their policies do not reach.

    ``refresh_continuous_aggregate`` cannot run in a transaction, so marks are deleted (by
    id) only after their buckets were refreshed: a failure leaves them for the next round,
    and a mark written meanwhile, for the same bucket, stays too.
    """
    rows = await conn.fetch("SELECT id, bucket FROM rollup_pending ORDER BY id LIMIT $1", _TS_MARKS_PER_ROUND)
    if not rows:
        return 0, 0
    oldest = now - RAW_RETENTION
    minutes = {r["bucket"] for r in rows if r["bucket"] >= oldest}
    cutovers = {str(r["rollup"]): r["cutover"] for r in await conn.fetch(
        "SELECT rollup, CASE WHEN isfinite(cutover) THEN cutover END AS cutover FROM rollup_cutover")}
    hours = {_floor(m, HOUR) for m in minutes}
    for name, new, old, width in _TS_GPU_ROLLUPS:
        for lo, hi in _runs(minutes if width == MINUTE else hours, width):
            await _refresh(conn, new, old, cutovers.get(name), lo, _ceil(hi, width))
            for _, added, _ in (a for a in _TS_ADDED if a[0] == name):
                await conn.execute(_refresh_sql(added), lo, _ceil(hi, width))
            if width == MINUTE:
                await conn.execute(_refresh_sql(_TS_PROCESS_ROLLUP), lo, hi)
    await conn.execute("DELETE FROM rollup_pending WHERE id = ANY($1::bigint[])", [r["id"] for r in rows])
    if minutes:
        log.info("rolled up %d late minutes (%d hours) the refresh policies do not reach", len(minutes), len(hours))
    return len(minutes), len(hours)


# --------------------------------------------------------------------------------------
# TimescaleDB chunk interval
# --------------------------------------------------------------------------------------

#: The raw hypertables whose chunk interval follows the setting (a whitelist, as regclass texts).
RAW_HYPERTABLES: Final = ("gpu_samples", "process_samples")


async def set_chunk_interval(conn: asyncpg.Connection, interval: timedelta) -> list[str]:
    """Give the raw hypertables ``interval`` for the chunks created from now on; returns those changed.

    Why a setting: the migration's 6 hours suits a few hundred GPUs; at 2,000 GPUs at 1 Hz a
    6-hour chunk is 43M rows, 22 GB with its indexes, far beyond what stays in memory
    (docs/deploy.md has the rule). Existing chunks keep theirs, as TimescaleDB does."""
    changed: list[str] = []
    rows = await conn.fetch(
        "SELECT hypertable_name, time_interval FROM timescaledb_information.dimensions "
        "WHERE hypertable_schema = current_schema() AND hypertable_name = ANY($1::text[])", list(RAW_HYPERTABLES))
    for row in rows:
        if row["time_interval"] != interval:
            await conn.execute("SELECT set_chunk_time_interval($1::regclass, $2::interval)",
                               row["hypertable_name"], interval)
            changed.append(str(row["hypertable_name"]))
    if changed:
        log.info("chunk interval of %s set to %s (chunks created from now on)", ", ".join(changed), interval)
    return changed


# --------------------------------------------------------------------------------------
# one maintenance round
# --------------------------------------------------------------------------------------


async def run(conn: asyncpg.Connection, now: datetime, profile: str = "plain") -> MaintenanceReport:
    """One round. Plain: partitions ahead, rollups, retention; TimescaleDB: late rollups.
    Skipped while another replica runs one."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", MAINTAIN_LOCK_KEY):
        log.debug("maintenance skipped: another collector is maintaining")
        return MaintenanceReport(ran=False)
    try:
        report = MaintenanceReport()
        if profile != "plain":
            report.minutes, report.hours = await refresh_late_timescale(conn, now)
            return report
        report.created = await ensure_partitions(conn, now)
        report.minutes, report.hours = await refresh_rollups(conn, now)
        report.dropped = await drop_old_partitions(conn, now)
        await apply_rollup_retention(conn, now)
        return report
    finally:
        if not conn.is_closed():
            await conn.execute("SELECT pg_advisory_unlock($1)", MAINTAIN_LOCK_KEY)
