"""The ``kernel_windows`` and ``kernel_stats`` tables: the CUPTI probe's windows, stored and read per service.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
The ingest path stores each batch's ``kernels`` messages with :class:`KernelStore` (one
transaction, both tables, ``ON CONFLICT DO NOTHING``, so a redelivered message is stored
once and offsets are committed only after it is); the API reads one service's range back
through the queries below, which all take a :class:`Selection` (service, optional namespace,
the caller's namespace scope, the time range) and filter by it in SQL, so a scoped caller
never reads, nor counts, another namespace's rows.

A window is placed at its start (``ts``) in every aggregate: a window belongs to the range
or time bucket it starts in. Sums of ``bigint`` columns come back as ``numeric`` and are
turned into ``int`` here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from collector.store.writer import _CONNECTION_ERRORS, _REFUSALS, StoreRefused
from telemetry.kernels import UNATTRIBUTED, KernelStat, KernelWindow

_INT64_MAX: Final = 2**63 - 1
#: rows per INSERT statement (parameters stay small; one transaction for the whole batch)
_WINDOWS_PER_STATEMENT: Final = 500
_STATS_PER_STATEMENT: Final = 4000
#: flame-graph rows read at most (pod x kernel pairs, heaviest first)
MAX_STACKS: Final = 5000


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------

_WINDOW_COLUMNS: Final = (
    ("ts", "timestamptz"), ("node", "text"), ("gpu", "text"), ("pid", "int"), ("namespace", "text"),
    ("pod", "text"), ("container", "text"), ("service", "text"), ("command", "text"),
    ("duration_s", "float8"), ("period_s", "float8"), ("kernel_ns", "int8"), ("busy_ns", "int8"),
    ("idle_ns", "int8"), ("idle_gaps", "int8"), ("memset_calls", "int8"), ("memset_ns", "int8"),
    ("sync_calls", "int8"), ("sync_ns", "int8"), ("launch_calls", "int8"), ("launch_ns", "int8"),
    ("records", "int8"), ("dropped_records", "int8"), ("copies", "text"), ("probe", "text"),
)
#: grid and block travel as one array per dimension (unnest cannot take an array of arrays)
_STAT_COLUMNS: Final = (
    ("ts", "timestamptz"), ("node", "text"), ("gpu", "text"), ("pid", "int"), ("namespace", "text"),
    ("pod", "text"), ("service", "text"), ("kernel", "text"), ("category", "text"), ("calls", "int8"),
    ("total_ns", "int8"), ("p95_ns", "int8"), ("short_calls", "int8"), ("gx", "int8"), ("gy", "int8"),
    ("gz", "int8"), ("bx", "int8"), ("by_", "int8"), ("bz", "int8"), ("registers", "int"),
    ("shared_bytes", "int8"), ("occupancy", "float4"),
)


def _unnest(columns: tuple[tuple[str, str], ...]) -> str:
    arrays = ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(columns, 1))
    return f"unnest({arrays}) AS t({', '.join(name for name, _ in columns)})"


_INSERT_WINDOWS: Final = (
    "INSERT INTO kernel_windows (" + ", ".join(n for n, _ in _WINDOW_COLUMNS) + ") "
    "SELECT " + ", ".join("copies::jsonb" if n == "copies" else n for n, _ in _WINDOW_COLUMNS)
    + " FROM " + _unnest(_WINDOW_COLUMNS) + " ON CONFLICT DO NOTHING"
)
_INSERT_STATS: Final = (
    "INSERT INTO kernel_stats (ts, node, gpu, pid, namespace, pod, service, kernel, category, calls, total_ns, "
    "p95_ns, short_calls, grid, block, registers, shared_bytes, occupancy) "
    "SELECT ts, node, gpu, pid, namespace, pod, service, kernel, category, calls, total_ns, p95_ns, short_calls, "
    "ARRAY[gx, gy, gz], ARRAY[bx, by_, bz], registers, shared_bytes, occupancy FROM " + _unnest(_STAT_COLUMNS)
    + " ON CONFLICT DO NOTHING"
)


def _unicode(value: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"kernels message field '{name}' is not valid Unicode (a lone surrogate), which "
                         "PostgreSQL text cannot store") from None


def check(window: KernelWindow) -> None:
    """Refuse what the decoder lets through but PostgreSQL cannot store; :class:`ValueError` names the field."""
    for name in ("command", "probe", "node", "gpu", "namespace", "pod", "container", "service"):
        _unicode(getattr(window, name), name)
    for i, k in enumerate(window.kernels):
        _unicode(k.name, f"kernels[{i}].name")
    if window.kernel_ns > _INT64_MAX:
        raise ValueError("kernels message field 'kernels' sums to more than 2^63 - 1 ns of kernel time")


def _merged(kernels: Sequence[KernelStat]) -> list[KernelStat]:
    """One entry per name (the probe sends one; a repeated name is summed, its first shape kept)."""
    by_name: dict[str, KernelStat] = {}
    for k in kernels:
        seen = by_name.get(k.name)
        if seen is None:
            by_name[k.name] = k
            continue
        by_name[k.name] = KernelStat(
            k.name, seen.calls + k.calls, min(_INT64_MAX, seen.total_ns + k.total_ns), max(seen.p95_ns, k.p95_ns),
            seen.grid, seen.block, seen.registers, seen.shared_bytes, seen.occupancy,
            min(_INT64_MAX, seen.short_calls + k.short_calls))
    return list(by_name.values())


def _rows(window: KernelWindow) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    check(window)
    w = window
    ts = datetime.fromtimestamp(w.ts, UTC)
    node, gpu, ns, pod, svc = w.node, w.gpu or None, w.namespace or None, w.pod or None, w.service or None
    copies = json.dumps([c.to_dict() for c in w.copies])
    row = (ts, node, gpu, w.pid, ns, pod, w.container or None, svc, w.command, w.duration_s, w.period_s,
           w.kernel_ns, w.busy_ns, w.idle_ns, w.idle_gaps, w.memset_calls, w.memset_ns, w.sync_calls, w.sync_ns,
           w.launch_calls, w.launch_ns, w.records, w.dropped_records, copies, w.probe)
    stats = [(ts, node, gpu, w.pid, ns, pod, svc, k.name, k.category, k.calls, k.total_ns, k.p95_ns, k.short_calls,
              *k.grid, *k.block, k.registers, k.shared_bytes, k.occupancy) for k in _merged(w.kernels)]
    return row, stats


def _columns(rows: Sequence[tuple[Any, ...]], count: int) -> list[list[Any]]:
    return [[row[i] for row in rows] for i in range(count)]


def _inserted(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def save(pool: Any, windows: Sequence[KernelWindow]) -> int:
    """Store ``windows`` in one transaction; returns how many were new (a redelivered one adds nothing).

    Raises :class:`ValueError` naming the field (before touching the database) for a window
    PostgreSQL cannot store, :class:`StoreRefused` when PostgreSQL refuses the data, and the
    driver's errors when the database is away (nothing is committed then; retrying is safe).
    """
    windows_rows: list[tuple[Any, ...]] = []
    stats_rows: list[tuple[Any, ...]] = []
    for w in windows:
        row, stats = _rows(w)
        windows_rows.append(row)
        stats_rows.extend(stats)
    if not windows_rows:
        return 0
    new = 0
    try:
        async with pool.acquire() as conn, conn.transaction():
            for i in range(0, len(windows_rows), _WINDOWS_PER_STATEMENT):
                chunk = windows_rows[i:i + _WINDOWS_PER_STATEMENT]
                new += _inserted(await conn.execute(_INSERT_WINDOWS, *_columns(chunk, len(_WINDOW_COLUMNS))))
            for i in range(0, len(stats_rows), _STATS_PER_STATEMENT):
                chunk = stats_rows[i:i + _STATS_PER_STATEMENT]
                await conn.execute(_INSERT_STATS, *_columns(chunk, len(_STAT_COLUMNS)))
    except _CONNECTION_ERRORS:
        await pool.expire_connections()
        raise
    except _REFUSALS as exc:
        raise StoreRefused(f"{type(exc).__name__}: {exc}") from None
    return new


class KernelStore:
    """Where the ingest path stores the ``kernels`` windows of a batch (:func:`save`)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def save(self, windows: Sequence[KernelWindow]) -> int:
        return await save(self.pool, windows)


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """One service's rows in ``[since, until)``; ``namespace`` narrows to one namespace,
    ``scope`` (a scoped caller's namespaces; None: all) keeps only rows of those."""

    service: str
    since: datetime
    until: datetime
    namespace: str | None = None
    scope: Sequence[str] | None = None

    def params(self) -> tuple[Any, ...]:
        return (self.service, self.namespace, None if self.scope is None else list(self.scope), self.since,
                self.until)


#: $1 service, $2 namespace (or NULL), $3 scope (or NULL), $4 since, $5 until
_WHERE: Final = ("coalesce(service, '" + UNATTRIBUTED + "') = $1 AND ($2::text IS NULL OR namespace = $2::text) "
                 "AND ($3::text[] IS NULL OR namespace = ANY($3::text[])) "
                 "AND ts >= $4::timestamptz AND ts < $5::timestamptz")
#: the time bucket of a row ($6 bucket width in seconds, $7 buckets)
_BUCKET: Final = ("least(greatest(floor(extract(epoch FROM ts - $4::timestamptz)::float8 / $6::float8), 0), "
                  "$7::int - 1)::int")


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


@dataclass(frozen=True, slots=True)
class WindowTotals:
    """The selection's windows: how many, whose, how long recorded, and their sums."""

    windows: int
    processes: int
    pods: int
    nodes: int
    recorded_s: float
    first: datetime | None
    last: datetime | None  # the end of the last window
    kernel_ns: int = 0
    busy_ns: int = 0
    idle_ns: int = 0
    idle_gaps: int = 0
    memset_calls: int = 0
    memset_ns: int = 0
    sync_calls: int = 0
    sync_ns: int = 0
    launch_calls: int = 0
    launch_ns: int = 0
    records: int = 0
    dropped_records: int = 0


_SUMMED: Final = ("kernel_ns", "busy_ns", "idle_ns", "idle_gaps", "memset_calls", "memset_ns", "sync_calls",
                  "sync_ns", "launch_calls", "launch_ns", "records", "dropped_records")
_TOTALS: Final = (
    "SELECT count(*) AS windows, count(DISTINCT (node, pid)) AS processes, "
    "count(DISTINCT coalesce(namespace, '') || '/' || pod) AS pods, count(DISTINCT node) AS nodes, "
    "coalesce(sum(duration_s), 0) AS recorded_s, min(ts) AS first, "
    "max(ts + make_interval(secs => duration_s)) AS last, "
    + ", ".join(f"sum({c}) AS {c}" for c in _SUMMED) + f" FROM kernel_windows WHERE {_WHERE}"
)


async def totals(db: Any, sel: Selection) -> WindowTotals:
    r = await db.fetchrow(_TOTALS, *sel.params())
    return WindowTotals(int(r["windows"]), int(r["processes"]), int(r["pods"]), int(r["nodes"]),
                        float(r["recorded_s"]), r["first"], r["last"], *(_int(r[c]) for c in _SUMMED))


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One kernel name over the selection. The launch shape (grid, block, registers, shared
    memory, occupancy) is that of the window in which the kernel took the most time."""

    name: str
    category: str
    calls: int
    total_ns: int
    p95_ns: int  # the largest of the windows' p95s
    short_calls: int
    windows: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    shared_bytes: int
    occupancy: float | None


@dataclass(frozen=True, slots=True)
class KernelTop:
    """The heaviest kernels, and the sums over every kernel of the selection."""

    kernels: list[KernelRow] = field(default_factory=list)
    all_ns: int = 0
    all_calls: int = 0
    all_short_calls: int = 0
    names: int = 0


_TOP: Final = (
    "WITH k AS (SELECT kernel, min(category) AS category, sum(calls) AS calls, sum(total_ns) AS total_ns, "
    "max(p95_ns) AS p95_ns, sum(short_calls) AS short_calls, count(*) AS windows, "
    "sum(sum(total_ns)) OVER () AS all_ns, sum(sum(calls)) OVER () AS all_calls, "
    "sum(sum(short_calls)) OVER () AS all_short, count(*) OVER () AS names "
    f"FROM kernel_stats WHERE {_WHERE} GROUP BY kernel ORDER BY sum(total_ns) DESC, kernel LIMIT $6), "
    "shape AS (SELECT DISTINCT ON (kernel) kernel, grid, block, registers, shared_bytes, occupancy "
    f"FROM kernel_stats WHERE {_WHERE} AND kernel IN (SELECT kernel FROM k) ORDER BY kernel, total_ns DESC, ts DESC) "
    "SELECT k.*, s.grid, s.block, s.registers, s.shared_bytes, s.occupancy FROM k JOIN shape s USING (kernel) "
    "ORDER BY k.total_ns DESC, k.kernel"
)


def _triple(value: Any) -> tuple[int, int, int]:
    v = [int(x) for x in value or ()] + [0, 0, 0]
    return (v[0], v[1], v[2])


def _kernel_row(r: Any) -> KernelRow:
    occ = r["occupancy"]
    return KernelRow(str(r["kernel"]), str(r["category"]), _int(r["calls"]), _int(r["total_ns"]), _int(r["p95_ns"]),
                     _int(r["short_calls"]), _int(r["windows"]), _triple(r["grid"]), _triple(r["block"]),
                     _int(r["registers"]), _int(r["shared_bytes"]), None if occ is None else round(float(occ), 4))


async def top_kernels(db: Any, sel: Selection, limit: int) -> KernelTop:
    """The ``limit`` kernels with the most time, heaviest first (ties by name)."""
    rows = await db.fetch(_TOP, *sel.params(), limit)
    if not rows:
        return KernelTop()
    first = rows[0]
    return KernelTop([_kernel_row(r) for r in rows], _int(first["all_ns"]), _int(first["all_calls"]),
                     _int(first["all_short"]), _int(first["names"]))


@dataclass(frozen=True, slots=True)
class ShortKernel:
    name: str
    short_calls: int
    calls: int


_SHORT: Final = (
    "SELECT kernel, sum(short_calls) AS short_calls, sum(calls) AS calls FROM kernel_stats "
    f"WHERE {_WHERE} AND short_calls > 0 GROUP BY kernel ORDER BY sum(short_calls) DESC, kernel LIMIT $6"
)


async def short_kernels(db: Any, sel: Selection, limit: int = 5) -> list[ShortKernel]:
    """The kernels with the most calls under :data:`telemetry.kernels.SHORT_KERNEL_NS` (fusion candidates)."""
    return [ShortKernel(str(r["kernel"]), _int(r["short_calls"]), _int(r["calls"]))
            for r in await db.fetch(_SHORT, *sel.params(), limit)]


@dataclass(frozen=True, slots=True)
class CopyRow:
    kind: str
    memory: str
    calls: int
    bytes: int
    total_ns: int


_COPIES: Final = (
    "SELECT c.value->>'kind' AS kind, c.value->>'memory' AS memory, sum((c.value->>'calls')::bigint) AS calls, "
    "sum((c.value->>'bytes')::bigint) AS bytes, sum((c.value->>'total_ns')::bigint) AS total_ns "
    f"FROM kernel_windows CROSS JOIN LATERAL jsonb_array_elements(copies) AS c(value) WHERE {_WHERE} "
    "GROUP BY 1, 2 ORDER BY 4 DESC, 1, 2"
)


async def copies(db: Any, sel: Selection) -> list[CopyRow]:
    """Copies summed per direction and host memory kind, most bytes first."""
    return [CopyRow(str(r["kind"]), str(r["memory"]), _int(r["calls"]), _int(r["bytes"]), _int(r["total_ns"]))
            for r in await db.fetch(_COPIES, *sel.params())]


@dataclass(frozen=True, slots=True)
class BucketRow:
    """One time bucket's windows: recorded seconds, GPU busy and idle time, kernel time."""

    index: int
    windows: int
    recorded_s: float
    busy_ns: int
    idle_ns: int
    kernel_ns: int


_BUCKETS: Final = (
    f"SELECT {_BUCKET} AS b, count(*) AS windows, sum(duration_s) AS recorded_s, sum(busy_ns) AS busy_ns, "
    f"sum(idle_ns) AS idle_ns, sum(kernel_ns) AS kernel_ns FROM kernel_windows WHERE {_WHERE} GROUP BY 1 ORDER BY 1"
)


def _width(sel: Selection, count: int) -> float:
    return (sel.until - sel.since).total_seconds() / count


async def buckets(db: Any, sel: Selection, count: int) -> list[BucketRow]:
    """The windows in ``count`` equal buckets of the range (only buckets with windows)."""
    return [BucketRow(int(r["b"]), int(r["windows"]), float(r["recorded_s"]), _int(r["busy_ns"]), _int(r["idle_ns"]),
                      _int(r["kernel_ns"]))
            for r in await db.fetch(_BUCKETS, *sel.params(), _width(sel, count), count)]


_TREND: Final = (
    f"SELECT {_BUCKET} AS b, CASE WHEN kernel = ANY($8::text[]) THEN kernel END AS k, sum(total_ns) AS ns "
    f"FROM kernel_stats WHERE {_WHERE} GROUP BY 1, 2"
)


async def trend(db: Any, sel: Selection, names: Sequence[str], count: int) -> tuple[dict[str, list[int]], list[int]]:
    """Kernel time per bucket: of each of ``names``, and of all kernels together."""
    per: dict[str, list[int]] = {n: [0] * count for n in names}
    total = [0] * count
    for r in await db.fetch(_TREND, *sel.params(), _width(sel, count), count, list(names)):
        ns, b = _int(r["ns"]), int(r["b"])
        total[b] += ns
        if r["k"] is not None:
            per[str(r["k"])][b] += ns
    return per, total


@dataclass(frozen=True, slots=True)
class StackRow:
    pod: str | None
    category: str
    kernel: str
    total_ns: int


_STACKS: Final = (
    "SELECT pod, min(category) AS category, kernel, sum(total_ns) AS ns FROM kernel_stats "
    f"WHERE {_WHERE} GROUP BY pod, kernel ORDER BY 4 DESC, 1, 3 LIMIT $6"
)


async def stacks(db: Any, sel: Selection, limit: int = MAX_STACKS) -> list[StackRow]:
    """Kernel time per pod and kernel, heaviest first (at most ``limit`` rows)."""
    return [StackRow(r["pod"], str(r["category"]), str(r["kernel"]), _int(r["ns"]))
            for r in await db.fetch(_STACKS, *sel.params(), limit)]
