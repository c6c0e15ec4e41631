"""One GPU's metrics over time, for everyone and for namespace-scoped tokens.

Why here rather than :func:`collector.store.queries.gpu_series`: the same buckets, but
PostgreSQL builds the JSON answer (an hour of 1-second points is twice as fast that
way), and a token scoped to namespaces may see a GPU's numbers only for the times a pod
of its namespaces held that GPU. Raw samples are kept when the same sample lists such a
process; rollup rows when ``process_samples_1m`` has such a pod on that GPU in that
minute. Hour steps are therefore built from the 1-minute rollup for scoped tokens (an
hour bucket would mix holders). Everyone else gets the store's choice of raw, 1-minute
or 1-hour data, picked from the step (:func:`collector.store.queries.choose_source`).

Every bucket of the range is answered, from the one holding ``start`` to the last
before ``end``; a bucket without data (an outage, a gap in sampling, a time the
caller's pods did not hold the GPU) is null in every series, so charts break their
lines there instead of drawing straight across.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from collector.api.principal import Principal
from collector.store import queries
from collector.store.schema import BY_KEY, ORIGIN_SQL, series_aggregate
from telemetry.keys import FB_USED, GPU_TEMP, POWER_USAGE, SM_ACTIVE

#: The metrics a series answers when none are asked for.
DEFAULT_METRICS: Final[tuple[str, ...]] = (SM_ACTIVE, FB_USED, POWER_USAGE, GPU_TEMP)


_TABLES: Final[dict[queries.Source, tuple[str, str]]] = {
    "raw": ("gpu_samples", "ts"),
    "1m": ("gpu_samples_1m", "bucket"),
    "1h": ("gpu_samples_1h", "bucket"),
}
_HELD: Final[dict[queries.Source, str]] = {
    "raw": ("EXISTS (SELECT 1 FROM process_samples p WHERE p.gpu = s.gpu AND p.ts = s.ts"
            " AND p.namespace = ANY($5::text[]))"),
    "1m": ("EXISTS (SELECT 1 FROM process_samples_1m p WHERE p.gpu = s.gpu AND p.bucket = s.bucket"
           " AND p.namespace = ANY($5::text[]))"),
}


def series_sql(metrics: Sequence[str], source: queries.Source, scoped: bool) -> str:
    """One row, one column: ``{"times": [...], "series": {metric: [...]}}`` as JSON text,
    every bucket of the range present (null where it has no data).

    The buckets are those of :func:`collector.store.queries.gpu_series` (``date_bin`` on the
    rollups' origin, weighted averages from rollups); PostgreSQL builds the JSON, which
    for an hour of 1-second points is about twice as fast as decoding rows and encoding
    them again in Python. Parameters: $1 GPU, $2 start, $3 end, $4 step, $5 scope.
    """
    cols = [BY_KEY[m] for m in metrics]
    table, time_col = _TABLES[source]
    aggs = ", ".join(f"{series_aggregate(c, source)} AS {c.name}" for c in cols)
    held = f" AND {_HELD[source]}" if scoped else ""
    inner = (
        f"SELECT date_bin($4::interval, s.{time_col}, {ORIGIN_SQL}) AS t, {aggs} FROM {table} s"
        f" WHERE s.gpu = $1 AND s.{time_col} >= date_bin($4::interval, $2::timestamptz, {ORIGIN_SQL})"
        f" AND s.{time_col} < $3{held} GROUP BY 1"
    )
    series = ", ".join(f"'{c.key}', COALESCE(json_agg(q.{c.name}::float8 ORDER BY b.t), '[]')" for c in cols)
    buckets = (f"SELECT generate_series(date_bin($4::interval, $2::timestamptz, {ORIGIN_SQL}),"
               " $3::timestamptz - interval '1 microsecond', $4::interval) AS t")
    return (
        "SELECT json_build_object('times', COALESCE(json_agg(extract(epoch FROM b.t)::float8 ORDER BY b.t), '[]'),"
        f" 'series', json_build_object({series}))::text FROM ({buckets}) b LEFT JOIN ({inner}) q ON q.t = b.t"
    )


def choose(who: Principal, step: timedelta) -> queries.Source:
    """The table to read: the store's choice, except that scoped callers never read hours."""
    source = queries.choose_source(step)
    return "1m" if who.scoped and source == "1h" else source


async def gpu_series_json(
    db: Any, who: Principal, gpu: str, metrics: Sequence[str], start: datetime, end: datetime, step: timedelta,
) -> tuple[queries.Source, str]:
    """``metrics`` of ``gpu`` per ``step`` as JSON text; scoped callers get only the buckets
    their pods held it."""
    source = choose(who, step)
    args: list[Any] = [gpu, start, end, step]
    if who.scoped:
        args.append(who.scope_param())
    text: str = await db.fetchval(series_sql(metrics, source, who.scoped), *args)
    return source, text


async def gpu_visible(db: Any, who: Principal, gpu: str, start: datetime, end: datetime) -> bool:
    """Whether ``gpu`` exists and, for a scoped caller, a pod of its namespaces held it in [start, end)."""
    if not who.scoped:
        return bool(await db.fetchval("SELECT EXISTS (SELECT 1 FROM gpu_inventory WHERE gpu = $1)", gpu))
    return bool(await db.fetchval(
        "SELECT EXISTS (SELECT 1 FROM process_samples WHERE gpu = $1 AND ts >= $2 AND ts < $3"
        " AND namespace = ANY($4::text[]))"
        " OR EXISTS (SELECT 1 FROM process_samples_1m WHERE gpu = $1 AND bucket >= $2 AND bucket < $3"
        " AND namespace = ANY($4::text[]))",
        gpu, start, end, who.scope_param(),
    ))
