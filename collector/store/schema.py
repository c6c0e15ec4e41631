"""Column lists of the store, derived from the metric catalog.

Why: the catalog (telemetry/catalog.py) is the one list of metrics. The migrations'
metric columns are generated from the lists here (:mod:`collector.store.sqlgen`, committed,
a test regenerates them), and a test compares a migrated database against them, so the
schema cannot drift from the catalog. The
writer, the plain-profile rollups and the read queries build their SQL from these
lists, so every identifier in a statement comes from here, never from input.

Rollups keep one column per metric under the metric's own column name, aggregated by
the catalog row's ``rollup`` (gauges averaged, counters their largest (latest) value,
the clock-event bitmask every reason seen (``bit_or``), the last-XID gauge the largest
code). Gauges whose peaks matter (the row's ``keep_max``) also keep ``<col>_max``.
Each averaged gauge also keeps ``<col>_n``, the number of samples that had it, so that
coarser steps weight each bucket's average by that count (a sample without the metric
adds nothing to its average) rather than by the bucket's sample count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal

from telemetry.catalog import CATALOG, Metric, RollupFn

SqlType = Literal["bigint", "double precision", "real"]

#: date_bin's origin for every bucket; with an explicit UTC offset so the session's
#: TimeZone cannot shift it. TimescaleDB's time_bucket gives the same minute and hour
#: buckets (its default origin, 2000-01-03, is a whole number of hours away).
ORIGIN_SQL: Final = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"

RAW_RETENTION: Final = timedelta(days=14)
ROLLUP_1M_RETENTION: Final = timedelta(days=90)
ROLLUP_1H_RETENTION: Final = timedelta(days=730)
#: TimescaleDB profile: samples older than this are marked for Store.maintain() to roll up,
#: since the refresh policies look back 7 days (1 hour: 8) and would never see them.
TIMESCALE_LATE_AFTER: Final = timedelta(days=6)


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """One catalog metric as a column of ``gpu_samples`` and of the rollups."""

    key: str
    name: str
    sql_type: SqlType
    rollup: RollupFn
    keep_max: bool
    #: the raw hypertable's type on a TimescaleDB database created since migration 0091: ``real``
    #: where a 32-bit float keeps every value at the metric's resolution, else ``sql_type``
    timescale_type: SqlType = "double precision"

    @property
    def rollup_type(self) -> SqlType:
        """The rollup column's type: averages are floats, max/bit_or keep the raw type."""
        return "double precision" if self.rollup == "avg" else self.sql_type

    @property
    def max_name(self) -> str:
        return f"{self.name}_max"

    @property
    def count_name(self) -> str:
        """The rollup column counting the samples that had this (averaged) metric."""
        return f"{self.name}_n"


def single_precision_keeps(metric: Metric) -> bool:
    """Whether ``real`` (a 32-bit float, 24-bit significand) keeps every value of ``metric``.

    A value quantised to the resolution ``r`` comes back from ``real`` within half its spacing, which
    is below ``r`` for every magnitude under ``r * 2**23``; so it keeps every value when the metric's
    ceiling is below that (ratios at 1e-4 up to 838, watts and cores at 0.001 up to 8,388). Integers
    stay ``bigint`` (already compact, and counters pass 2**24), and a metric with no ceiling (bytes/s,
    requests/s, seconds) stays ``double precision``.
    """
    ceiling = metric.ceiling
    return not metric.is_integer and ceiling is not None and ceiling < metric.resolution * 2**23


def metric_column(metric: Metric) -> MetricColumn:
    sql_type: SqlType = "bigint" if metric.is_integer else "double precision"
    return MetricColumn(
        key=metric.key,
        name=metric.key.lower(),
        sql_type=sql_type,
        rollup=metric.rollup,
        keep_max=metric.keep_max,
        timescale_type="real" if single_precision_keeps(metric) else sql_type,
    )


METRIC_COLUMNS: Final[tuple[MetricColumn, ...]] = tuple(metric_column(m) for m in CATALOG)
BY_KEY: Final[dict[str, MetricColumn]] = {c.key: c for c in METRIC_COLUMNS}
#: the averaged metrics: their rollups also count the samples that had them (``<col>_n``)
AVERAGED: Final[tuple[MetricColumn, ...]] = tuple(c for c in METRIC_COLUMNS if c.rollup == "avg")

#: ``gpu_samples``: name -> SQL type, in table order.
SAMPLE_COLUMNS: Final[dict[str, str]] = {
    "ts": "timestamp with time zone",
    "gpu": "text",
    "node": "text",
    **{c.name: c.sql_type for c in METRIC_COLUMNS},
    "extra": "jsonb",
}
#: ``gpu_samples`` on a TimescaleDB database created since migration 0091 (an older one keeps
#: :data:`SAMPLE_COLUMNS`: the migration changes the types only where no samples are stored yet).
TIMESCALE_SAMPLE_COLUMNS: Final[dict[str, str]] = {
    **SAMPLE_COLUMNS, **{c.name: c.timescale_type for c in METRIC_COLUMNS}}
#: the metric columns migration 0091 makes ``real``
REAL_COLUMNS: Final[tuple[MetricColumn, ...]] = tuple(c for c in METRIC_COLUMNS if c.timescale_type == "real")

PROCESS_COLUMNS: Final[dict[str, str]] = {
    "ts": "timestamp with time zone",
    "gpu": "text",
    "pid": "integer",
    "name": "text",
    "namespace": "text",
    "pod": "text",
    "container": "text",
    "service": "text",
    "used_memory_mib": "double precision",
    "sm_util": "double precision",
    "mem_util": "double precision",
}


def rollup_metric_columns(columns: Sequence[MetricColumn]) -> dict[str, SqlType]:
    """A rollup's columns for ``columns``: each metric, then its ``_max`` where it keeps one."""
    cols: dict[str, SqlType] = {}
    for c in columns:
        cols[c.name] = c.rollup_type
        if c.keep_max:
            cols[c.max_name] = c.sql_type
    return cols


def _gpu_rollup_columns() -> dict[str, str]:
    cols: dict[str, str] = {
        "bucket": "timestamp with time zone",
        "gpu": "text",
        "node": "text",
        "samples": "bigint",
        **rollup_metric_columns(METRIC_COLUMNS),
    }
    for c in AVERAGED:  # added by migration 0050, hence last
        cols[c.count_name] = "bigint"
    return cols


#: ``gpu_samples_1m`` and ``gpu_samples_1h`` (same columns on both profiles).
GPU_ROLLUP_COLUMNS: Final[dict[str, str]] = _gpu_rollup_columns()

PROCESS_ROLLUP_COLUMNS: Final[dict[str, str]] = {
    "bucket": "timestamp with time zone",
    "gpu": "text",
    "namespace": "text",
    "pod": "text",
    "service": "text",
    "samples": "bigint",
    "sm_util": "double precision",
    "mem_util": "double precision",
    "used_memory_mib": "double precision",
    "used_memory_mib_max": "double precision",
}

#: ``gpu_samples_1m`` / ``_1h`` on a TimescaleDB database created since migration 0091: the peak of a
#: ``real`` metric (``<col>_max``, a raw value) is ``real`` too; the averages stay double precision.
TIMESCALE_GPU_ROLLUP_COLUMNS: Final[dict[str, str]] = {
    **GPU_ROLLUP_COLUMNS, **{c.max_name: "real" for c in REAL_COLUMNS if c.keep_max}}

ROLLUP_TABLES: Final = {
    "gpu_samples_1m": GPU_ROLLUP_COLUMNS,
    "gpu_samples_1h": GPU_ROLLUP_COLUMNS,
    "process_samples_1m": PROCESS_ROLLUP_COLUMNS,
}

# --------------------------------------------------------------------------------------
# SQL fragments (identifiers from the lists above only)
# --------------------------------------------------------------------------------------


def _weight(column: MetricColumn) -> str:
    """How many samples of a rollup row had ``column``: its count, or for rows made before
    the counts existed (migration 0050), the row's sample count where it has a value."""
    c = column.name
    return f"coalesce({column.count_name}, CASE WHEN {c} IS NOT NULL THEN samples ELSE 0 END)"


def _weighted_avg(column: MetricColumn) -> str:
    """The average of per-bucket averages, each weighted by the samples that had the metric.

    Weighting by all of a bucket's samples instead would let a minute in which the metric
    was missing from some samples count as much as a minute in which it never was.
    """
    w = _weight(column)
    return f"(sum({column.name} * {w}) / NULLIF(sum({w}), 0))::double precision"


def raw_aggregates(columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> list[tuple[str, str]]:
    """(column, aggregate over raw ``gpu_samples`` rows) for a 1-minute rollup row."""
    out: list[tuple[str, str]] = [("node", "max(node)"), ("samples", "count(*)")]
    for c in columns:
        if c.rollup == "avg":
            out.append((c.name, f"avg({c.name}::double precision)"))
        else:
            out.append((c.name, f"{c.rollup}({c.name})"))
        if c.keep_max:
            out.append((c.max_name, f"max({c.name})"))
    out += [(c.count_name, f"count({c.name})") for c in columns if c.rollup == "avg"]
    return out


def rollup_aggregates(columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> list[tuple[str, str]]:
    """(column, aggregate over finer rollup rows) for a coarser rollup row (1m -> 1h)."""
    out: list[tuple[str, str]] = [("node", "max(node)"), ("samples", "sum(samples)::bigint")]
    for c in columns:
        if c.rollup == "avg":
            out.append((c.name, _weighted_avg(c)))
        else:
            out.append((c.name, f"{c.rollup}({c.name})"))
        if c.keep_max:
            out.append((c.max_name, f"max({c.max_name})"))
    out += [(c.count_name, f"sum({_weight(c)})::bigint") for c in columns if c.rollup == "avg"]
    return out


def process_raw_aggregates() -> list[tuple[str, str]]:
    """(column, aggregate over raw ``process_samples`` rows) for ``process_samples_1m``."""
    return [
        ("samples", "count(*)"),
        ("sm_util", "avg(sm_util)"),
        ("mem_util", "avg(mem_util)"),
        ("used_memory_mib", "avg(used_memory_mib)"),
        ("used_memory_mib_max", "max(used_memory_mib)"),
    ]


def read_sql(column: MetricColumn, alias: str = "") -> str:
    """How a raw metric column is read back. A ``real`` one (TimescaleDB, migration 0091) goes through
    its text, so it reads as the decimal it was stored as (0.1234), not as its float32 value widened to
    a double (0.12340000271797180); on a double column (the plain profile, an older database) the text
    round-trips exactly, so the same SQL serves both."""
    name = f"{alias}.{column.name}" if alias else column.name
    return f"{name}::text::double precision" if column.timescale_type == "real" else name


def series_aggregate(column: MetricColumn, source: Literal["raw", "1m", "1h"]) -> str:
    """The aggregate that re-buckets one metric at a coarser step, from raw rows or a rollup."""
    if source == "raw":
        if column.rollup == "avg":
            return f"avg({read_sql(column)}::double precision)"
        return f"{column.rollup}({read_sql(column)})"
    if column.rollup == "avg":
        return _weighted_avg(column)
    return f"{column.rollup}({column.name})"


def quote_ident(name: str) -> str:
    """Quote an identifier that came from this module or from the catalog (never from input)."""
    return '"' + name.replace('"', '""') + '"'
