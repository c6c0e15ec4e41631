"""Read queries over raw samples and rollups, identical on both storage profiles.

Why here: the API, dashboards and detectors' backfills need "metric X of GPU Y from A
to B every S", and the answer should come from the cheapest table that can give it
exactly: raw rows for sub-minute steps, the 1-minute rollup for whole minutes, the
1-hour rollup for whole hours. Re-bucketing uses ``date_bin`` (PostgreSQL 14+, valid
with and without TimescaleDB) on the same UTC origin as the rollups, so rollup buckets
nest exactly in the requested steps. Averages of rollup rows are weighted by their
sample counts; counters, the last XID and the clock-event bitmask keep max/bit_or.

Metric names are checked against the catalog and only catalog-derived column names
reach the SQL text; values and times are bind parameters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal, Protocol

from collector.store.schema import BY_KEY, METRIC_COLUMNS, ORIGIN_SQL, MetricColumn, read_sql, series_aggregate

Source = Literal["raw", "1m", "1h"]
SourceChoice = Literal["auto", "raw", "1m", "1h"]

_TABLES: Final[dict[Source, tuple[str, str, timedelta]]] = {
    "raw": ("gpu_samples", "ts", timedelta(0)),
    "1m": ("gpu_samples_1m", "bucket", timedelta(minutes=1)),
    "1h": ("gpu_samples_1h", "bucket", timedelta(hours=1)),
}


class Executor(Protocol):
    """What the queries need: an asyncpg Pool or Connection."""

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Series:
    """Values per metric at ``times`` (bucket starts); None where a bucket had no reading."""

    source: Source
    step: timedelta
    times: list[datetime] = field(default_factory=list)
    values: dict[str, list[float | int | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Latest:
    """The newest stored sample of one GPU: its catalog metrics that were present, and extras."""

    gpu: str
    node: str
    model: str | None
    ts: datetime
    metrics: dict[str, float | int]


def choose_source(step: timedelta) -> Source:
    """The coarsest table whose buckets tile ``step`` exactly."""
    if step % timedelta(hours=1) == timedelta(0):
        return "1h"
    if step % timedelta(minutes=1) == timedelta(0):
        return "1m"
    return "raw"


def _columns(metrics: Sequence[str]) -> list[MetricColumn]:
    if not metrics:
        raise ValueError("at least one metric is required")
    unknown = [m for m in metrics if m not in BY_KEY]
    if unknown:
        raise ValueError(f"unknown metrics (not in the catalog): {unknown}")
    return [BY_KEY[m] for m in metrics]


async def gpu_series(
    db: Executor,
    gpu: str,
    metrics: Sequence[str],
    start: datetime,
    end: datetime,
    step: timedelta,
    *,
    source: SourceChoice = "auto",
) -> Series:
    """``metrics`` of ``gpu`` in buckets of ``step`` from the bucket holding ``start`` up to ``end``.

    ``source="auto"`` reads the 1-hour rollup when ``step`` is a whole number of hours,
    the 1-minute rollup when it is a whole number of minutes, else raw samples.
    Buckets without rows are absent (no gap filling).
    """
    if step <= timedelta(0):
        raise ValueError("step must be positive")
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    cols = _columns(metrics)
    chosen: Source = choose_source(step) if source == "auto" else source
    table, time_col, _width = _TABLES[chosen]
    aggs = ", ".join(f"{series_aggregate(c, chosen)} AS {c.name}" for c in cols)
    sql = (
        f"SELECT date_bin($4::interval, {time_col}, {ORIGIN_SQL}) AS t, {aggs}\n"
        f"FROM {table}\n"
        f"WHERE gpu = $1 AND {time_col} >= date_bin($4::interval, $2::timestamptz, {ORIGIN_SQL})"
        f" AND {time_col} < $3\n"
        "GROUP BY 1 ORDER BY 1"
    )
    rows = await db.fetch(sql, gpu, start, end, step)
    return Series(
        source=chosen,
        step=step,
        times=[r["t"] for r in rows],
        values={m: [r[c.name] for r in rows] for m, c in zip(metrics, cols, strict=True)},
    )


async def latest_per_gpu(db: Executor, metrics: Sequence[str] | None = None) -> list[Latest]:
    """The newest sample of every GPU in the inventory, ordered by node and GPU.

    One index probe per GPU (``gpu_samples (gpu, ts)``, newest first), not a scan.
    """
    cols = list(METRIC_COLUMNS) if metrics is None else _columns(metrics)
    select = ", ".join(f"{read_sql(c, 's')} AS {c.name}" for c in cols)
    sql = (
        f"SELECT i.gpu, i.node, i.model, s.ts, s.extra, {select}\n"
        "FROM gpu_inventory i\n"
        f"JOIN LATERAL (SELECT ts, extra, {', '.join(c.name for c in cols)} FROM gpu_samples\n"
        "              WHERE gpu = i.gpu AND ts <= i.last_seen ORDER BY ts DESC LIMIT 1) s ON true\n"
        "ORDER BY i.node, i.gpu"
    )
    out: list[Latest] = []
    for row in await db.fetch(sql):
        values: dict[str, float | int] = {c.key: row[c.name] for c in cols if row[c.name] is not None}
        if metrics is None and row["extra"] is not None:
            extra = json.loads(row["extra"])
            values.update({k: v for k, v in extra.items() if k not in values})
        out.append(Latest(gpu=row["gpu"], node=row["node"], model=row["model"], ts=row["ts"], metrics=values))
    return out
