"""One GPU's metrics over time as JSON text, for everyone or for namespace-scoped callers.

Why here, next to :func:`collector.store.queries.gpu_series`: the same buckets, but
PostgreSQL builds the JSON answer (an hour of 1-second points is twice as fast that
way), and the store is the one way into the database. For callers limited to some
namespaces (``scope`` not None) a GPU's numbers are kept only for the times a pod
of those namespaces held that GPU: raw samples when the same sample lists such a
process; rollup rows when ``process_samples_1m`` has such a pod on that GPU in that
minute. There is no scoped read of the hour rollup (an hour bucket would mix holders):
the caller picks the 1-minute rollup instead (:func:`collector.api.series.choose`).

Every bucket of the range is answered, from the one holding ``start`` to the last
before ``end``; a bucket without data is null in every series.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from collector.store.queries import Source
from collector.store.schema import BY_KEY, ORIGIN_SQL, series_aggregate

_TABLES: Final[dict[Source, tuple[str, str]]] = {
    "raw": ("gpu_samples", "ts"),
    "1m": ("gpu_samples_1m", "bucket"),
    "1h": ("gpu_samples_1h", "bucket"),
}
_HELD: Final[dict[Source, str]] = {
    "raw": ("EXISTS (SELECT 1 FROM process_samples p WHERE p.gpu = s.gpu AND p.ts = s.ts"
            " AND p.namespace = ANY($5::text[]))"),
    "1m": ("EXISTS (SELECT 1 FROM process_samples_1m p WHERE p.gpu = s.gpu AND p.bucket = s.bucket"
           " AND p.namespace = ANY($5::text[]))"),
}
_KNOWN: Final = "SELECT EXISTS (SELECT 1 FROM gpu_inventory WHERE gpu = $1)"
_HELD_BETWEEN: Final = (
    "SELECT EXISTS (SELECT 1 FROM process_samples WHERE gpu = $1 AND ts >= $2 AND ts < $3"
    " AND namespace = ANY($4::text[]))"
    " OR EXISTS (SELECT 1 FROM process_samples_1m WHERE gpu = $1 AND bucket >= $2 AND bucket < $3"
    " AND namespace = ANY($4::text[]))"
)


def series_sql(metrics: Sequence[str], source: Source, scoped: bool) -> str:
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


async def series_json(
    db: Any, gpu: str, metrics: Sequence[str], start: datetime, end: datetime, step: timedelta,
    source: Source, scope: Sequence[str] | None = None,
) -> str:
    """``metrics`` of ``gpu`` per ``step`` from ``source`` as JSON text (see :func:`series_sql`);
    with ``scope`` (namespaces), only the buckets in which their pods held the GPU (not from ``"1h"``)."""
    if scope is not None and source not in _HELD:
        raise ValueError(f"no scoped series from the {source} rollup")
    args: list[Any] = [gpu, start, end, step]
    if scope is not None:
        args.append(list(scope))
    text: str = await db.fetchval(series_sql(metrics, source, scope is not None), *args)
    return text


async def gpu_visible(
    db: Any, gpu: str, start: datetime, end: datetime, scope: Sequence[str] | None = None,
) -> bool:
    """Whether ``gpu`` exists and, with ``scope`` (namespaces), a pod of theirs held it in [start, end)."""
    if scope is None:
        return bool(await db.fetchval(_KNOWN, gpu))
    return bool(await db.fetchval(_HELD_BETWEEN, gpu, start, end, list(scope)))
