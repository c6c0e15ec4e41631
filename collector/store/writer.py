"""Idempotent batch writes: the collector's one way into PostgreSQL.

Why this shape: the consumer commits Kafka offsets only after the database has
committed, so a crash between the two redelivers a batch. Every write therefore goes
through a unique key (``gpu_samples (gpu, ts)``, ``process_samples (gpu, ts, pid)``,
``events (gpu, ts, kind, code)``) with ``ON CONFLICT DO NOTHING``, and a redelivered
batch adds no row. Rows are bulk-loaded with binary COPY into per-connection TEMP
staging tables and moved with one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``
per table (COPY itself cannot skip duplicates), all in one transaction together with
the inventory upsert and the marks of which 1-minute buckets need re-aggregating (plain
profile: all of them; TimescaleDB: those too old for its refresh policies).
:class:`WriteResult` says how many rows were new.

The sample key stays ``(gpu, ts)``, without the node, on purpose. A GPU UUID names one
physical GPU; two nodes reporting the same UUID is a misconfiguration (a re-imaged node, a
simulator) that the collector reports as a ``gpu_uuid_conflict`` event. Each agent stamps
samples with its own clock, as float seconds stored to the microsecond, so two such
streams collide only if two samples fall on the same microsecond; the second is then
counted as already stored (``samples_dup``). Adding the node to the key would change every
index, rollup and query keyed by GPU for that misconfiguration, and make a node rename
store a redelivered sample twice.

A record that can never be stored (an integer metric out of bigint range, a string
with a NUL byte, a timestamp outside PostgreSQL's range...) raises :class:`BadRecord`
naming the GPU, timestamp and field *before* the transaction starts, so the consumer
can dead-letter that frame and move on instead of retrying it forever. A missing
reading is NULL, never 0: NaN (the contract's "no reading") and other non-finite
floats are stored as NULL. Outages (``OSError``, asyncpg connection errors) propagate
unchanged: the consumer pauses and retries the same batch, which is safe because
writes are idempotent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import asyncpg

from collector.store import maintenance, queries, usage
from collector.store.migrate import Profile, migrate_pool
from collector.store.rows import fast_rows
from collector.store.schema import (
    BY_KEY,
    METRIC_COLUMNS,
    ORIGIN_SQL,
    PROCESS_COLUMNS,
    SAMPLE_COLUMNS,
    TIMESCALE_LATE_AFTER,
)
from telemetry.records import EventRecord, GpuRecord

log = logging.getLogger(__name__)

_INT64: Final = (-(2**63), 2**63 - 1)
_INT32: Final = (-(2**31), 2**31 - 1)

SAMPLE_COLUMN_NAMES: Final[tuple[str, ...]] = tuple(SAMPLE_COLUMNS)
PROCESS_COLUMN_NAMES: Final[tuple[str, ...]] = tuple(PROCESS_COLUMNS)


class BadRecord(ValueError):
    """A record (or event) that cannot be stored; names the GPU, timestamp and field."""

    def __init__(self, gpu: object, ts: object, field: str, reason: str) -> None:
        self.gpu = gpu
        self.ts = ts
        self.field = field
        self.reason = reason
        super().__init__(f"cannot store record gpu={gpu!r} ts={ts!r}: field {field}: {reason}")


class _Invalid(Exception):
    """Raised by the converters; turned into BadRecord by the caller, which knows gpu and ts."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one :meth:`Store.write` did: new rows, and samples that were already stored."""

    samples_new: int = 0
    samples_dup: int = 0
    processes_new: int = 0
    events_new: int = 0

    def __add__(self, other: WriteResult) -> WriteResult:
        return WriteResult(
            self.samples_new + other.samples_new,
            self.samples_dup + other.samples_dup,
            self.processes_new + other.processes_new,
            self.events_new + other.events_new,
        )


# --------------------------------------------------------------------------------------
# conversion and validation
# --------------------------------------------------------------------------------------


def _timestamp(value: object, field: str) -> datetime:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(field, f"must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise _Invalid(field, f"must be finite, got {value!r}")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise _Invalid(field, f"{value!r} is outside the storable time range ({exc})") from None


def _text(value: object, field: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise _Invalid(field, "is required")
        return None
    if not isinstance(value, str):
        raise _Invalid(field, f"must be a string, got {type(value).__name__}")
    if required and not value:
        raise _Invalid(field, "must not be empty")
    if "\x00" in value:
        raise _Invalid(field, "contains a NUL character, which PostgreSQL text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid(field, "is not valid Unicode (lone surrogate)") from None
    return value


def _float(value: object, field: str) -> float | None:
    """A float column: non-finite readings are missing readings (NULL)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(field, f"must be a number, got {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        raise _Invalid(field, f"{value!r} is too large for double precision") from None
    return result if math.isfinite(result) else None


def _int(value: object, field: str, bounds: tuple[int, int] = _INT64) -> int | None:
    """An integer column: NaN is a missing reading; fractions, infinities and overflow are errors."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(field, f"must be an integer, got {type(value).__name__}")
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise _Invalid(field, f"{value!r} does not fit an integer column")
        if not value.is_integer():
            raise _Invalid(field, f"{value!r} is not an integer")
        value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        kind = "bigint" if bounds == _INT64 else "integer"
        raise _Invalid(field, f"{value} is out of {kind} range")
    return value


def _sample_row(record: GpuRecord) -> tuple[Any, ...]:
    ts = _timestamp(record.ts, "ts")
    gpu = _text(record.gpu, "gpu", required=True)
    node = _text(record.node, "node", required=True)
    metrics = record.metrics
    if not isinstance(metrics, dict):
        raise _Invalid("metrics", f"must be a mapping, got {type(metrics).__name__}")
    values: list[Any] = []
    for col in METRIC_COLUMNS:
        raw = metrics.get(col.key)
        if col.sql_type == "bigint":
            values.append(_int(raw, f"metrics.{col.key}"))
        else:
            values.append(_float(raw, f"metrics.{col.key}"))
    extra: dict[str, float | int] = {}
    for key, raw in metrics.items():
        if key in BY_KEY:
            continue
        field = f"metrics.{key!s:.80}"
        _text(key, field, required=True)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise _Invalid(field, f"must be a number, got {type(raw).__name__}")
        if isinstance(raw, float) and not math.isfinite(raw):
            continue  # a missing reading is absent, as in the JSON contract
        extra[key] = raw
    return (ts, gpu, node, *values, json.dumps(extra, allow_nan=False) if extra else None)


def _process_rows(record: GpuRecord, ts: datetime) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for i, proc in enumerate(record.processes):
        where = f"processes[{i}]"
        pid = _int(proc.pid, f"{where}.pid", _INT32)
        if pid is None:
            raise _Invalid(f"{where}.pid", "is required")
        rows.append((
            ts,
            record.gpu,
            pid,
            _text(proc.name, f"{where}.name"),
            _text(proc.namespace, f"{where}.namespace"),
            _text(proc.pod, f"{where}.pod"),
            _text(proc.container, f"{where}.container"),
            _text(proc.service, f"{where}.service"),
            _float(proc.used_memory_mib, f"{where}.used_memory_mib"),
            _float(proc.sm_util, f"{where}.sm_util"),
            _float(proc.mem_util, f"{where}.mem_util"),
        ))
    return rows


def _inventory_attrs(record: GpuRecord) -> tuple[str | None, ...]:
    return (
        _text(record.model, "model"),
        _text(record.driver_version, "driver_version"),
        _text(record.pci_bus_id, "pci_bus_id"),
        _text(record.mig_profile, "mig_profile"),
        _text(record.parent_gpu, "parent_gpu"),
    )


def _event_row(event: EventRecord) -> tuple[Any, ...]:
    return (
        _timestamp(event.ts, "ts"),
        _text(event.node, "node", required=True),
        _text(event.gpu, "gpu", required=True),
        _text(event.kind, "kind", required=True),
        _int(event.code, "code", _INT32),
        _text(event.detail, "detail") or "",
    )


def validate(record: GpuRecord) -> None:
    """Raise :class:`BadRecord` if ``record`` cannot be stored (the checks :meth:`Store.write` makes)."""
    _prepare_record(record)


def validate_event(event: EventRecord) -> None:
    """Raise :class:`BadRecord` if ``event`` cannot be stored."""
    try:
        _event_row(event)
    except _Invalid as exc:
        raise BadRecord(getattr(event, "gpu", None), getattr(event, "ts", None), f"event.{exc.field}",
                        exc.reason) from None


def _prepare_record(record: GpuRecord) -> tuple[tuple[Any, ...], list[tuple[Any, ...]], tuple[str | None, ...]]:
    try:
        sample = _sample_row(record)
        return sample, _process_rows(record, sample[0]), _inventory_attrs(record)
    except _Invalid as exc:
        raise BadRecord(getattr(record, "gpu", None), getattr(record, "ts", None), exc.field, exc.reason) from None


@dataclass(slots=True)
class _Inventory:
    node: str
    attrs: list[str | None]
    first: datetime
    last: datetime


@dataclass(slots=True)
class PreparedBatch:
    """A batch converted to rows, validated, and sorted so concurrent writers lock in one order."""

    samples: list[tuple[Any, ...]]
    processes: list[tuple[Any, ...]]
    events: list[tuple[Any, ...]]
    inventory: list[tuple[Any, ...]]


def prepare(records: Iterable[GpuRecord], events: Iterable[EventRecord] = ()) -> PreparedBatch:
    """Convert and validate a batch; raises :class:`BadRecord` for the first bad item.

    A regular batch is converted column by column (:func:`collector.store.rows.fast_rows`);
    anything irregular takes the exact way, record by record, which names what is wrong.
    """
    records = records if isinstance(records, Sequence) else list(records)
    fast = fast_rows(records)
    if fast is None:
        slow = [_prepare_record(record) for record in records]
        samples = [s for s, _, _ in slow]
        processes = [p for _, procs, _ in slow for p in procs]
        attrs_list = [a for _, _, a in slow]
    else:
        samples, processes, attrs_list = fast
    inventory: dict[str, _Inventory] = {}
    for sample, attrs in zip(samples, attrs_list, strict=True):
        ts, gpu, node = sample[0], sample[1], sample[2]
        inv = inventory.get(gpu)
        if inv is None:
            inventory[gpu] = _Inventory(node, list(attrs), ts, ts)
            continue
        if ts >= inv.last:  # the newest sample's description wins; older ones only fill gaps
            inv.node = node
            if attrs != tuple(inv.attrs):
                inv.attrs = [new if new is not None else old for new, old in zip(attrs, inv.attrs, strict=True)]
            inv.last = ts
        elif attrs != tuple(inv.attrs):
            inv.attrs = [old if old is not None else new for new, old in zip(attrs, inv.attrs, strict=True)]
        if ts < inv.first:
            inv.first = ts
    event_rows: list[tuple[Any, ...]] = []
    for event in events:
        try:
            event_rows.append(_event_row(event))
        except _Invalid as exc:
            raise BadRecord(getattr(event, "gpu", None), getattr(event, "ts", None), f"event.{exc.field}",
                            exc.reason) from None
    inventory_rows = [
        (gpu, inv.node, *inv.attrs, inv.first, inv.last) for gpu, inv in sorted(inventory.items())
    ]
    return PreparedBatch(samples, processes, event_rows, inventory_rows)


# --------------------------------------------------------------------------------------
# SQL (identifiers from collector.store.schema only)
# --------------------------------------------------------------------------------------

_STAGE_SAMPLES: Final = "gw_stage_samples"
_STAGE_PROCESSES: Final = "gw_stage_processes"

# Temp tables live as long as the connection; ON COMMIT DELETE ROWS empties them at
# every commit (and a rollback discards their rows), so each transaction starts empty.
# IF NOT EXISTS (not a once-per-connection setup) keeps this right behind a
# transaction-pooling proxy and across reconnects; SET LOCAL hides its NOTICE.
_CREATE_STAGING: Final = f"""
SET LOCAL client_min_messages = warning;
CREATE TEMP TABLE IF NOT EXISTS {_STAGE_SAMPLES} (LIKE gpu_samples INCLUDING DEFAULTS) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS {_STAGE_PROCESSES} (LIKE process_samples INCLUDING DEFAULTS) ON COMMIT DELETE ROWS;
"""

_SAMPLE_COLS_SQL: Final = ", ".join(SAMPLE_COLUMN_NAMES)
_PROCESS_COLS_SQL: Final = ", ".join(PROCESS_COLUMN_NAMES)

# ORDER BY: concurrent writers of overlapping keys take their locks in one order.
_MOVE_SAMPLES: Final = (
    f"INSERT INTO gpu_samples ({_SAMPLE_COLS_SQL}) SELECT {_SAMPLE_COLS_SQL} FROM {_STAGE_SAMPLES} "
    "ORDER BY gpu, ts ON CONFLICT (gpu, ts) DO NOTHING"
)
_MOVE_PROCESSES: Final = (
    f"INSERT INTO process_samples ({_PROCESS_COLS_SQL}) SELECT {_PROCESS_COLS_SQL} FROM {_STAGE_PROCESSES} "
    "ORDER BY gpu, ts, pid ON CONFLICT (gpu, ts, pid) DO NOTHING"
)
_INSERT_EVENTS: Final = """
INSERT INTO events (ts, node, gpu, kind, code, detail)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::integer[], $6::text[])
    AS e(ts, node, gpu, kind, code, detail)
ORDER BY gpu, ts, kind, code
ON CONFLICT (gpu, ts, kind, (COALESCE(code, -1))) DO NOTHING
"""

# Descriptive columns follow the newest sample (a redelivered old batch does not undo
# a newer description); first_seen only moves earlier and last_seen only later.
_INVENTORY_ATTRS: Final = ("model", "driver_version", "pci_bus_id", "mig_profile", "parent_gpu")
_UPSERT_INVENTORY: Final = (
    "INSERT INTO gpu_inventory AS i (gpu, node, " + ", ".join(_INVENTORY_ATTRS) + ", first_seen, last_seen)\n"
    "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],"
    " $8::timestamptz[], $9::timestamptz[])\n"
    "ON CONFLICT (gpu) DO UPDATE SET\n"
    "    node = CASE WHEN EXCLUDED.last_seen >= i.last_seen THEN EXCLUDED.node ELSE i.node END,\n"
    + "".join(
        f"    {a} = CASE WHEN EXCLUDED.last_seen >= i.last_seen THEN COALESCE(EXCLUDED.{a}, i.{a})"
        f" ELSE COALESCE(i.{a}, EXCLUDED.{a}) END,\n"
        for a in _INVENTORY_ATTRS
    )
    + "    first_seen = LEAST(i.first_seen, EXCLUDED.first_seen),\n"
    "    last_seen = GREATEST(i.last_seen, EXCLUDED.last_seen)"
)
_MARK_PENDING: Final = (
    f"INSERT INTO rollup_pending (bucket) SELECT DISTINCT date_bin(INTERVAL '1 minute', ts, {ORIGIN_SQL}) "
    f"FROM {_STAGE_SAMPLES}"
)


def _inserted(status: str) -> int:
    """Row count of an ``INSERT 0 <n>`` command status."""
    return int(status.rsplit(" ", 1)[-1])


def _columns(rows: Sequence[tuple[Any, ...]], count: int) -> list[list[Any]]:
    return [[row[i] for row in rows] for i in range(count)]


_MARK_BUCKETS: Final = "INSERT INTO rollup_pending (bucket) SELECT unnest($1::timestamptz[])"


async def write_batch(conn: asyncpg.Connection, batch: PreparedBatch, *, profile: Profile) -> WriteResult:
    """Write a prepared batch in one transaction on ``conn``.

    First the direct way: binary COPY straight into ``gpu_samples`` and
    ``process_samples``, inside a savepoint. A batch that is new (the normal case) is
    then written at COPY speed, with no staging table and no ON CONFLICT merge. If any
    row's key is already stored (a redelivered batch, after a collector crash), the
    unique index refuses the COPY, the savepoint is rolled back, and the batch takes the
    merge (staging COPY + ``INSERT ... ON CONFLICT DO NOTHING``), which skips exactly the
    stored rows.
    """
    async with conn.transaction():
        samples_new = processes_new = events_new = 0
        direct = False
        if batch.samples:
            try:
                async with conn.transaction():  # a savepoint
                    await conn.copy_records_to_table("gpu_samples", records=batch.samples, columns=SAMPLE_COLUMN_NAMES)
                    if batch.processes:
                        await conn.copy_records_to_table(
                            "process_samples", records=batch.processes, columns=PROCESS_COLUMN_NAMES,
                        )
                direct = True
                samples_new, processes_new = len(batch.samples), len(batch.processes)
            except asyncpg.UniqueViolationError:
                pass
        if not direct and (batch.samples or batch.processes):
            await conn.execute(_CREATE_STAGING)
            if batch.samples:
                await conn.copy_records_to_table(_STAGE_SAMPLES, records=batch.samples, columns=SAMPLE_COLUMN_NAMES)
                samples_new = _inserted(await conn.execute(_MOVE_SAMPLES))
            if batch.processes:
                await conn.copy_records_to_table(
                    _STAGE_PROCESSES, records=batch.processes, columns=PROCESS_COLUMN_NAMES,
                )
                processes_new = _inserted(await conn.execute(_MOVE_PROCESSES))
        if batch.events:
            events_new = _inserted(await conn.execute(_INSERT_EVENTS, *_columns(batch.events, 6)))
        if batch.inventory:
            await conn.execute(_UPSERT_INVENTORY, *_columns(batch.inventory, 9))
        if profile == "plain" and (samples_new or processes_new):
            if direct:
                await conn.execute(_MARK_BUCKETS, _minute_buckets(batch.samples))
            else:
                await conn.execute(_MARK_PENDING)
        elif samples_new or processes_new:  # TimescaleDB: only what its refresh policies will not see
            late = datetime.now(UTC) - TIMESCALE_LATE_AFTER
            old = [b for b in _minute_buckets(batch.samples) if b < late]
            if old:
                await conn.execute(_MARK_BUCKETS, old)
    return WriteResult(samples_new, len(batch.samples) - samples_new, processes_new, events_new)


def _minute_buckets(samples: Sequence[tuple[Any, ...]]) -> list[datetime]:
    """The distinct 1-minute buckets of the samples' ts, as ``date_bin('1 minute', ts, ORIGIN)`` makes them.

    The origin is midnight UTC, so a bucket is the UTC timestamp with seconds cut off.
    """
    return sorted({row[0].replace(second=0, microsecond=0) for row in samples})


# --------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------

#: Errors after which the pool's other connections are probably dead too (server
#: restarted, network cut): they are expired, so the next write reconnects at once.
_CONNECTION_ERRORS: Final = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
)

#: Failures of a database operation that mean "try the same operation again later": the
#: database is away, restarting, short of resources, or a transaction lost a conflict.
#: What a batch's *content* makes PostgreSQL refuse is :class:`StoreRefused` instead
#: (raised by :meth:`Store.write`), so retrying cannot loop on bad data.
DB_UNAVAILABLE: Final[tuple[type[BaseException], ...]] = (
    OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresError,
    # asyncpg's "cannot switch to state N; another operation is in progress": a connection left
    # mid-operation by a server that went away under it (seen opening the store while PostgreSQL
    # restarted); the pool is dropped and opened again, like any lost connection
    asyncpg.exceptions.InternalClientError,
)

#: PostgreSQL refusing the data itself: class 22 (data exception), 23 (integrity), 54 (limits).
_REFUSALS: Final = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
    asyncpg.exceptions.ProgramLimitExceededError,
)


class StoreRefused(ValueError):
    """PostgreSQL refused a batch for what it holds (validation missed it); the message says why."""


class Store:
    """The collector's storage: migrated on open, idempotent writes, maintenance, reads.

    Open with :meth:`open` (connects a pool and migrates); ``profile`` is then the
    database's profile. One instance is shared by the consumer, maintenance and the API.
    """

    profile: Profile

    def __init__(self, pool: Any, profile: Profile, profile_reason: str = "") -> None:
        self._pool = pool
        self.profile = profile
        self.profile_reason = profile_reason  # why this profile (for the start-up line)

    @property
    def pool(self) -> Any:
        """The asyncpg pool (for read queries and tests)."""
        return self._pool

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        profile: str = "auto",
        now: datetime | None = None,
        chunk_interval: float | None = None,
        **connect_kwargs: Any,
    ) -> Store:
        """Connect a pool to ``dsn``, migrate, and (plain profile) create today's partitions.

        ``profile``: ``auto`` (TimescaleDB when the extension can be created, else plain
        PostgreSQL), ``timescale`` or ``plain``. ``connect_kwargs`` go to
        ``asyncpg.create_pool`` (e.g. ``statement_cache_size=0, ssl=False`` for PGlite,
        ``command_timeout``). ``now`` (tests) places the first partitions. ``chunk_interval``
        (seconds, TimescaleDB): the raw hypertables' chunk interval for chunks made from now on.
        """
        pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, **connect_kwargs)
        try:
            choice = await migrate_pool(pool, profile)
            if choice.profile == "plain":
                async with pool.acquire() as conn:
                    await maintenance.ensure_partitions(conn, now or datetime.now(UTC))
                if chunk_interval is not None:
                    log.warning("the chunk interval setting is ignored on the plain profile (day partitions)")
            elif chunk_interval is not None:
                async with pool.acquire() as conn:
                    await maintenance.set_chunk_interval(conn, timedelta(seconds=chunk_interval))
        except BaseException:
            pool.terminate()
            raise
        log.info("store open: profile %s (%s)", choice.profile, choice.reason)
        return cls(pool, choice.profile, choice.reason)

    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> WriteResult:
        """Store a batch in one transaction; a redelivered batch adds nothing.

        Raises :class:`BadRecord` (before touching the database) for a record that can
        never be stored, and the driver's exceptions (``OSError``, asyncpg errors) when
        the database is unreachable; nothing is committed then, and retrying is safe.
        """
        batch = prepare(records, events)
        if not (batch.samples or batch.events):
            return WriteResult()
        try:
            async with self._pool.acquire() as conn:
                return await write_batch(conn, batch, profile=self.profile)
        except _CONNECTION_ERRORS:
            await self._pool.expire_connections()
            raise
        except _REFUSALS as exc:
            raise StoreRefused(f"{type(exc).__name__}: {exc}") from None

    async def maintain(self, now: datetime | None = None) -> None:
        """Plain profile: partitions ahead, rollups of new data, retention. TimescaleDB: the
        rollups of data too late for its refresh policies (the policies do the rest)."""
        try:
            async with self._pool.acquire() as conn:
                await maintenance.run(conn, now or datetime.now(UTC), self.profile)
        except _CONNECTION_ERRORS:
            await self._pool.expire_connections()
            raise

    async def refresh_usage(self, now: datetime | None = None) -> int | None:
        """The service usage tables' changed minutes (:func:`collector.store.usage.refresh`):
        a round of the collector's background loop, next to :meth:`maintain`, so service
        history stays fresh whether the API runs or not. Pod-minute rows written, or None
        when another replica's refresh held the lock."""
        try:
            async with self._pool.acquire() as conn:
                return await usage.refresh(conn, now or datetime.now(UTC))
        except _CONNECTION_ERRORS:
            await self._pool.expire_connections()
            raise

    async def gpu_series(
        self,
        gpu: str,
        metrics: Sequence[str],
        start: datetime,
        end: datetime,
        step: timedelta,
        *,
        source: queries.SourceChoice = "auto",
    ) -> queries.Series:
        """See :func:`collector.store.queries.gpu_series`."""
        return await queries.gpu_series(self._pool, gpu, metrics, start, end, step, source=source)

    async def latest_per_gpu(self, metrics: Sequence[str] | None = None) -> list[queries.Latest]:
        """See :func:`collector.store.queries.latest_per_gpu`."""
        return await queries.latest_per_gpu(self._pool, metrics)

    async def close(self, timeout: float = 10.0) -> None:
        """Close the pool gracefully; terminate connections that do not close within ``timeout``."""
        try:
            await asyncio.wait_for(self._pool.close(), timeout)
        except TimeoutError:
            log.warning("store pool did not close within %.1f s; terminating its connections", timeout)
            self._pool.terminate()
