"""How well the TimescaleDB profile's schema compresses, on a real TimescaleDB server (issue 16 item 4).

Local verification only: it needs a TimescaleDB server that you built and started yourself, and it
never runs in CI (``benchmarks/`` is outside pytest's ``testpaths``). What it measures, on
generated fleet data at 1 Hz written through the collector's own store (``Store.open`` with
``profile="timescale"`` migrates the shipped schema, ``Store.write`` COPYs the rows):

* raw hypertables (``gpu_samples``, ``process_samples``): bytes before and after compression,
  per GPU-sample and per stored value, the ratio, and per column of ``gpu_samples`` the bytes of
  its compressed batches (``pg_column_size`` over the compressed chunks);
* the continuous aggregates (rollups, compressed by migration 0090): bytes per GPU per day
  before and after compression, and what 90 days of 1-minute rollups cost per GPU against
  14 days of compressed raw samples;
* per table (raw, each 1-minute and each 1-hour rollup): rows, rows per compressed batch, bytes
  per row before and after compression, and after compression per GPU-day and per 1 Hz GPU-sample
  (a 1-minute row stands for 60 of them, a 1-hour row for 3,600);
* with ``--history-days``: the 1-hour rollups' rows copied back in time (shifted by whole multiples
  of the loaded window, so their values are the loaded ones) to fill that many days before the
  window, through their materialization hypertables, so their chunks are as full as two years of
  history make them (a 1-hour chunk of 30 days holds 720 rows per GPU, more than a 3-day load gives);
* value types (an investigation, the schema is not changed): the float columns of the raw
  samples and of the 1-minute rollup copied into side tables as shipped (double precision),
  as ``real``, and as scaled integers at the catalog's resolution (telemetry/catalog.py),
  compressed the same way (segment by GPU, ordered by time), and their compressed bytes.

Compression is done by the shipped policies themselves: the policy jobs are paused while
loading (so the scheduler does not race the measurement), then each compression policy is run
once with ``CALL run_job(id)``; the data are backdated ``--age-days`` so that every chunk,
rollups included, is past its policy's ``compress_after``. Any chunk a policy left
uncompressed is compressed with ``compress_chunk`` and counted in the report.

Data: the incident suite's fleet generator (tests/support/incidents/generate.py, the one
bench_deploy_sizing.py's ``--timescale`` run uses; ``--gpus`` in nodes of 8, each worker a fleet
of its own seed, node names made unique). It leaves some columns an H200 agent fills empty; the
loader derives them (``_fill``): the energy counter (the integral of power, mJ), memory-copy
utilisation, SM occupancy, FP32/FP16 pipe activity and NVLink bytes, with noise, at the catalog's
resolution. Host evidence and inference columns stay NULL (agents without host evidence, pods
not scraped).

Building and starting the server (local only; Debian 12, PostgreSQL 15; as root)::

    apt-get update && apt-get install -y postgresql-15 postgresql-server-dev-15 cmake build-essential libssl-dev
    git --git-dir=<mirror of timescale/timescaledb> archive 2.23.1 | tar -x -C /tmp/tsdb-src
    cd /tmp/tsdb-src && ./bootstrap -DREGRESS_CHECKS=OFF -DTAP_CHECKS=OFF && cd build && make -j2 && make install
    mkdir -p /tmp/tsdb-data /tmp/tsdbsock && chown postgres /tmp/tsdb-data /tmp/tsdbsock
    su postgres -c "/usr/lib/postgresql/15/bin/initdb -D /tmp/tsdb-data/pg -A trust -U postgres"
    su postgres -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/tsdb-data/pg -l /tmp/tsdb-data/pg.log \
        -o '-p 55432 -k /tmp/tsdbsock -c listen_addresses=127.0.0.1 -c shared_preload_libraries=timescaledb \
        -c shared_buffers=1GB -c max_wal_size=4GB' start"

Then (the DSN's database is only used to create and drop the benchmark's own, ``--db-name``)::

    python benchmarks/bench_timescale_compression.py --dsn postgresql://postgres@127.0.0.1:55432/postgres \
        --gpus 32 --days 2.5 --workers 2 --json docs/bench-runs/timescale-compression-2026-12-04.json

Before and after migrations 0091/0092 (docs/benchmarks.md, "30-day chunks for the 1-hour rollups and
`real` metric columns"): ``--gpus 16 --days 2 --history-days 730 --skip-value-types --version 2.23.1``,
once on a checkout of the older migrations and once on the newer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RAW = ("gpu_samples", "process_samples")
#: The continuous aggregates that refresh (and that migration 0090 compresses), in refresh order.
ROLLUPS_1M = ("gpu_samples_1m_v2", "gpu_samples_1m_host", "gpu_samples_1m_0061", "process_samples_1m")
ROLLUPS_1H = ("gpu_samples_1h_v2", "gpu_samples_1h_host", "gpu_samples_1h_0061")
ROLLUPS = ROLLUPS_1M + ROLLUPS_1H
BATCH = 4000  # records per Store.write (a collector batch is up to 5,000 messages)
MIB = 1 << 20


def _db_dsn(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


# --------------------------------------------------------------------------------------
# loading (worker processes)
# --------------------------------------------------------------------------------------


def _fill(metrics: dict[str, float], state: dict[str, float], rng: random.Random) -> None:
    """The columns an H200 agent fills that the incident generator leaves empty, derived with noise.

    At the catalog's resolution: ratios to 1e-4, utilisations in whole percent, bytes/s whole,
    the energy counter in whole mJ (the integral of the power at 1 Hz)."""
    sm = metrics.get("DCGM_FI_PROF_SM_ACTIVE", 0.0)
    dram = metrics.get("DCGM_FI_PROF_DRAM_ACTIVE", 0.0)
    power = metrics.get("DCGM_FI_DEV_POWER_USAGE", 0.0)
    state["energy"] = state.get("energy", 1.0e9 * rng.random()) + power * 1000.0
    metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = float(int(state["energy"]))
    metrics["DCGM_FI_DEV_MEM_COPY_UTIL"] = float(min(100, round(100 * dram * (0.9 + 0.2 * rng.random()))))
    metrics["DCGM_FI_DEV_ENC_UTIL"] = 0.0
    metrics["DCGM_FI_DEV_DEC_UTIL"] = 0.0
    metrics["DCGM_FI_PROF_SM_OCCUPANCY"] = round(min(1.0, sm * (0.35 + 0.1 * rng.random())), 4)
    metrics["DCGM_FI_PROF_PIPE_FP32_ACTIVE"] = round(sm * (0.08 + 0.04 * rng.random()), 4)
    metrics["DCGM_FI_PROF_PIPE_FP16_ACTIVE"] = round(sm * (0.02 + 0.02 * rng.random()), 4)
    metrics["DCGM_FI_PROF_PIPE_FP64_ACTIVE"] = 0.0
    nvlink = 0.0 if sm < 0.02 else sm * 40e9 * (0.8 + 0.4 * rng.random())
    metrics["DCGM_FI_PROF_NVLINK_TX_BYTES"] = float(round(nvlink))
    metrics["DCGM_FI_PROF_NVLINK_RX_BYTES"] = float(round(nvlink * (0.95 + 0.1 * rng.random())))


def _load_worker(dsn: str, first_node: int, nodes: int, seconds: int, t0: float, seed: int) -> dict[str, Any]:
    return asyncio.run(_load(dsn, first_node, nodes, seconds, t0, seed))


async def _load(dsn: str, first_node: int, nodes: int, seconds: int, t0: float, seed: int) -> dict[str, Any]:
    from collector.store import Store
    from telemetry.records import GpuRecord
    from tests.support.incidents.generate import Fleet

    fleet = Fleet(nodes=nodes, hours=seconds / 3600, seed=seed, t0=t0)
    for g in fleet.gpus:  # every worker's fleet numbers its nodes from 0: make them unique
        g.node = f"gpu-node-{first_node + g.node_no:03d}"
    rng = random.Random(seed)
    states: dict[str, dict[str, float]] = {}
    store = await Store.open(dsn, min_size=1, max_size=1, profile="timescale")
    samples = processes = 0
    started = time.perf_counter()
    try:
        batch: list[GpuRecord] = []
        for record in fleet.records():
            if not isinstance(record, GpuRecord):  # the agents' events (lost GPUs): not samples
                continue
            _fill(record.metrics, states.setdefault(record.gpu, {}), rng)
            batch.append(record)
            if len(batch) >= BATCH:
                result = await store.write(batch)
                samples += result.samples_new
                processes += result.processes_new
                batch = []
        if batch:
            result = await store.write(batch)
            samples += result.samples_new
            processes += result.processes_new
    finally:
        await store.close()
    return {"first_node": first_node, "nodes": nodes, "seed": seed, "samples": samples, "processes": processes,
            "seconds": round(time.perf_counter() - started, 1)}


# --------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------


async def _mat_tables(conn: Any) -> dict[str, str]:
    """Each continuous aggregate's materialization hypertable (schema-qualified)."""
    rows = await conn.fetch(
        "SELECT view_name, format('%I.%I', materialization_hypertable_schema, materialization_hypertable_name) AS mat"
        " FROM timescaledb_information.continuous_aggregates")
    return {str(r["view_name"]): str(r["mat"]) for r in rows}


async def _sizes(conn: Any, tables: dict[str, str]) -> dict[str, dict[str, int]]:
    out = {}
    for name, rel in tables.items():
        row = await conn.fetchrow("SELECT * FROM hypertable_detailed_size($1::regclass)", rel)
        out[name] = {k: int(row[k] or 0) for k in ("table_bytes", "index_bytes", "toast_bytes", "total_bytes")}
    return out


async def _chunks(conn: Any, rel: str) -> tuple[int, int]:
    """(chunks, compressed chunks) of a hypertable."""
    row = await conn.fetchrow(
        "SELECT count(*) AS n, count(*) FILTER (WHERE is_compressed) AS c FROM timescaledb_information.chunks"
        " WHERE format('%I.%I', hypertable_schema, hypertable_name)::regclass = $1::regclass", rel)
    return int(row["n"]), int(row["c"])


async def _compressed_chunk_tables(conn: Any, rel: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT format('%I.%I', cc.schema_name, cc.table_name) AS t FROM _timescaledb_catalog.chunk c"
        " JOIN _timescaledb_catalog.chunk cc ON cc.id = c.compressed_chunk_id"
        " JOIN _timescaledb_catalog.hypertable h ON h.id = c.hypertable_id"
        " WHERE format('%I.%I', h.schema_name, h.table_name)::regclass = $1::regclass", rel)
    # a dropped chunk's compressed table is gone (2.23 marks it dropped; 2.28 has no such column)
    return [str(r["t"]) for r in rows if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", r["t"])]


async def _column_bytes(conn: Any, rel: str) -> dict[str, Any]:
    """Bytes of each column's compressed batches over all compressed chunks of ``rel``, and the batches."""
    tables = await _compressed_chunk_tables(conn, rel)
    if not tables:
        return {"batches": 0, "columns": {}}
    cols = [str(r["attname"]) for r in await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum", tables[0])]
    totals = dict.fromkeys(cols, 0)
    batches = 0
    select = ", ".join(f'coalesce(sum(pg_column_size("{c}")), 0)::bigint AS "{c}"' for c in cols)
    for table in tables:
        row = await conn.fetchrow(f"SELECT count(*) AS _batches, {select} FROM {table}")
        batches += int(row["_batches"])
        for c in cols:
            totals[c] += int(row[c])
    return {"batches": batches, "chunks": len(tables), "columns": totals}


async def _non_null(conn: Any, rel: str, columns: Sequence[str]) -> dict[str, int]:
    select = ", ".join(f'count("{c}") AS "{c}"' for c in columns)
    row = await conn.fetchrow(f"SELECT {select} FROM {rel}")
    return {c: int(row[c]) for c in columns}


async def _value_columns(conn: Any, rel: str, skip: Sequence[str]) -> list[str]:
    rows = await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum", rel)
    return [str(r["attname"]) for r in rows if str(r["attname"]) not in skip]


async def _run_policies(conn: Any) -> list[dict[str, Any]]:
    """Run every compression policy once (CALL run_job), as the scheduler would."""
    rows = await conn.fetch(
        "SELECT job_id, hypertable_name, config FROM timescaledb_information.jobs"
        " WHERE proc_name = 'policy_compression' ORDER BY job_id")
    out = []
    for r in rows:
        t = time.perf_counter()
        error = None
        try:
            await conn.execute(f"CALL run_job({int(r['job_id'])})")
        except Exception as exc:  # noqa: BLE001  (reported, then the chunks are compressed by hand)
            error = f"{type(exc).__name__}: {exc}"
        out.append({"job_id": int(r["job_id"]), "hypertable": str(r["hypertable_name"]),
                    "config": json.loads(r["config"]) if isinstance(r["config"], str) else r["config"],
                    "seconds": round(time.perf_counter() - t, 1), "error": error})
    return out


async def _compress_rest(conn: Any, rel: str) -> int:
    rows = await conn.fetch(
        "SELECT format('%I.%I', chunk_schema, chunk_name) AS c FROM timescaledb_information.chunks"
        " WHERE format('%I.%I', hypertable_schema, hypertable_name)::regclass = $1::regclass AND NOT is_compressed",
        rel)
    for r in rows:
        await conn.execute("SELECT compress_chunk($1::regclass)", r["c"])
    return len(rows)


async def _history(conn: Any, mats: Sequence[str], lo: datetime, hi: datetime, days: float) -> dict[str, Any]:
    """Copy the 1-hour rollups' rows of [lo, hi) back in time, ``days`` before ``lo``, in whole windows.

    Why: a 1-hour row per GPU per hour fills a 30-day chunk only with 30 days of history, which a
    1 Hz load of a few days cannot give; copies of the loaded hours (their own values, shifted by
    multiples of the window) fill the chunks the way the rollup's own history would."""
    window = hi - lo
    copies = math.ceil(days * 86400 / window.total_seconds()) if days > 0 else 0
    rows = {}
    for mat in mats:
        cols = [str(r["attname"]) for r in await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped"
            " ORDER BY attnum", mat)]
        others = ", ".join(f'"{c}"' for c in cols if c != "bucket")
        n = 0
        for k in range(1, copies + 1):
            status = await conn.execute(
                f'INSERT INTO {mat} (bucket, {others}) SELECT bucket - $1::interval, {others} FROM {mat}'
                " WHERE bucket >= $2 AND bucket < $3", window * k, lo, hi)
            n += int(status.split()[-1])
        rows[mat] = n
    return {"days": days, "copies": copies, "window_hours": window.total_seconds() / 3600, "rows_added": rows}


# --------------------------------------------------------------------------------------
# value types
# --------------------------------------------------------------------------------------


def _raw_quantum(column: str) -> tuple[float, str] | None:
    """The catalog's resolution of a float column of ``gpu_samples`` (None: not a float metric)."""
    from telemetry.catalog import CATALOG

    for m in CATALOG:
        if m.key.lower() == column and not m.is_integer:
            return m.resolution, m.unit
    return None


def _real_allows(quantum: float, largest: float) -> bool:
    """Does ``real`` (24-bit significand) keep every value up to ``largest`` at ``quantum``?

    Values quantised to ``quantum`` survive a trip through real when real's spacing at the
    largest magnitude is below the quantum: ``largest < quantum * 2**23``."""
    return largest < quantum * 2**23


async def _variant_table(conn: Any, name: str, source_sql: str, time_col: str, segment: str,
                         columns: dict[str, str], interval: str) -> dict[str, Any]:
    """A hypertable ``name`` of the source rows with the given column expressions, compressed like the shipped one."""
    await conn.execute(f"DROP TABLE IF EXISTS {name}")
    exprs = ", ".join(f'{expr} AS "{col}"' for col, expr in columns.items())
    await conn.execute(
        f"CREATE TABLE {name} AS SELECT {time_col}, {segment}, {exprs} FROM ({source_sql}) s WITH NO DATA")
    await conn.execute(f"SELECT create_hypertable('{name}', by_range('{time_col}', INTERVAL '{interval}'))")
    await conn.execute(f"INSERT INTO {name} SELECT {time_col}, {segment}, {exprs} FROM ({source_sql}) s")
    await conn.execute(f"ALTER TABLE {name} SET (timescaledb.compress, timescaledb.compress_segmentby = '{segment}',"
                       f" timescaledb.compress_orderby = '{time_col} DESC')")
    before = int(await conn.fetchval(f"SELECT hypertable_size('{name}')"))
    await _compress_rest(conn, name)
    after = int(await conn.fetchval(f"SELECT hypertable_size('{name}')"))
    cols = await _column_bytes(conn, name)
    value_bytes = sum(cols["columns"].get(c, 0) for c in columns)
    return {"bytes_before": before, "bytes_after": after, "value_columns_bytes": value_bytes,
            "columns": {c: cols["columns"].get(c, 0) for c in columns}, "batches": cols["batches"]}


async def _value_types(conn: Any, raw_window: tuple[datetime, datetime], mat_1m: str) -> dict[str, Any]:
    """Float columns as shipped (double precision), as real, as scaled integers; compressed bytes of each."""
    out: dict[str, Any] = {}
    # raw samples: the float metric columns of gpu_samples in one 6-hour window (one chunk of every GPU)
    floats = [str(r["attname"]) for r in await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'gpu_samples'::regclass AND attnum > 0"
        " AND NOT attisdropped AND atttypid = 'double precision'::regtype ORDER BY attnum")]
    lo, hi = raw_window
    source = (f"SELECT * FROM gpu_samples WHERE ts >= '{lo.isoformat()}' AND ts < '{hi.isoformat()}'")
    rows = int(await conn.fetchval(f"SELECT count(*) FROM ({source}) s"))
    largest = {c: float(v or 0) for c, v in zip(floats, (await conn.fetchrow(
        "SELECT " + ", ".join(f'max(abs("{c}"))' for c in floats) + f" FROM ({source}) s")).values(), strict=True)}
    catalog: dict[str, Any] = {}
    scaled: dict[str, str] = {}
    for c in floats:
        q = _raw_quantum(c)
        quantum, unit = q if q is not None else (0.001, "?")
        int_type = "bigint" if largest[c] / quantum >= 2**31 - 1 else "integer"
        scaled[c] = f'round("{c}" / {quantum!r})::{int_type}'
        catalog[c] = {"unit": unit, "resolution": quantum, "largest_seen": largest[c],
                      "real_keeps_resolution_up_to": quantum * 2**23, "scaled_type": int_type,
                      "real_ok_in_this_data": _real_allows(quantum, largest[c])}
    variants = {
        "double": {c: f'"{c}"' for c in floats},
        "real": {c: f'"{c}"::real' for c in floats},
        "scaled_integer": scaled,
    }
    raw: dict[str, Any] = {"rows": rows, "window": [lo.isoformat(), hi.isoformat()], "catalog": catalog, "variants": {}}
    for v, cols in variants.items():
        raw["variants"][v] = await _variant_table(conn, f"vt_raw_{v}", source, "ts", "gpu", cols, "6 hours")
    out["raw"] = raw
    # the 1-minute rollup's averaged (double precision) columns, all of its rows
    avg_cols = [str(r["attname"]) for r in await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped"
        " AND atttypid = 'double precision'::regtype ORDER BY attnum", mat_1m)]
    source = f"SELECT * FROM {mat_1m}"
    rows = int(await conn.fetchval(f"SELECT count(*) FROM {mat_1m}"))
    interval = str(await conn.fetchval(
        "SELECT time_interval::text FROM timescaledb_information.dimensions"
        " WHERE format('%I.%I', hypertable_schema, hypertable_name)::regclass = $1::regclass", mat_1m))
    # an average has no resolution of its own: keep the catalog's for floats, 0.01 of the unit for
    # integer metrics (a percent, a degree, a MHz, a MiB), whole bytes/s
    quanta = {}
    for c in avg_cols:
        q = _raw_quantum(c)
        quanta[c] = q[0] if q is not None else 0.01
    largest = {c: float(v or 0) for c, v in zip(avg_cols, (await conn.fetchrow(
        "SELECT " + ", ".join(f'max(abs("{c}"))' for c in avg_cols) + f" FROM {mat_1m}")).values(), strict=True)}
    variants = {
        "double": {c: f'"{c}"' for c in avg_cols},
        "real": {c: f'"{c}"::real' for c in avg_cols},
        "double_rounded": {c: f'round("{c}" / {quanta[c]!r}) * {quanta[c]!r}' for c in avg_cols},
        "scaled_integer": {c: f'round("{c}" / {quanta[c]!r})::'
                              f'{"bigint" if largest[c] / quanta[c] >= 2**31 - 1 else "integer"}' for c in avg_cols},
    }
    roll: dict[str, Any] = {"rows": rows, "chunk_interval": interval, "quanta": quanta, "variants": {}}
    for v, cols in variants.items():
        roll["variants"][v] = await _variant_table(conn, f"vt_1m_{v}", source, "bucket", "gpu", cols, interval)
    out["rollup_1m"] = roll
    for v in ("double", "real", "scaled_integer"):
        await conn.execute(f"DROP TABLE IF EXISTS vt_raw_{v}")
    for v in variants:
        await conn.execute(f"DROP TABLE IF EXISTS vt_1m_{v}")
    return out


# --------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------


async def _prepare(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh database with the shipped schema; the policy jobs paused."""
    import asyncpg

    from collector.store import Store

    admin = await asyncpg.connect(args.dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{args.db_name}"')
    finally:
        await admin.close()
    dsn = _db_dsn(args.dsn, args.db_name)
    if args.version:  # else Store.open creates the server's default version
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"CREATE EXTENSION timescaledb VERSION '{args.version}'")
        finally:
            await conn.close()
    attempts: list[str] = []
    while True:  # a fresh schema's migrations can deadlock with the policy jobs they start (reported)
        try:
            store = await Store.open(dsn, min_size=1, max_size=1, profile="timescale")
            break
        except asyncpg.DeadlockDetectedError as exc:
            attempts.append(f"{type(exc).__name__}: {exc}")
            if len(attempts) >= 5:
                raise
    try:
        conn_pool = store.pool
        jobs = [int(r["job_id"]) for r in await conn_pool.fetch(
            "SELECT job_id FROM timescaledb_information.jobs WHERE job_id >= 1000")]
        for job in jobs:
            await conn_pool.execute("SELECT alter_job($1, scheduled => false)", job)
        version = str(await conn_pool.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"))
        server = str(await conn_pool.fetchval("SELECT version()"))
    finally:
        await store.close()
    return {"dsn": dsn, "migration_failures": attempts, "jobs_paused": len(jobs), "timescaledb": version,
            "server": server}


async def _measure(dsn: str, start: datetime, end: datetime, gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET statement_timeout = 0")
        t = time.perf_counter()
        lo = start.replace(minute=0, second=0, microsecond=0)
        hi = end.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        refresh_s = {}
        for view in ROLLUPS:  # the 1-minute ones first: the 1-hour ones are built on them
            t1 = time.perf_counter()
            await conn.execute("CALL refresh_continuous_aggregate($1::regclass, $2::timestamptz, $3::timestamptz)",
                               view, lo, hi)
            refresh_s[view] = round(time.perf_counter() - t1, 1)
        mats = await _mat_tables(conn)
        history = await _history(conn, [mats[v] for v in ROLLUPS_1H], lo, hi, args.history_days)
        await conn.execute("VACUUM ANALYZE")
        tables = {**{r: r for r in RAW}, **{v: mats[v] for v in ROLLUPS}}
        counts = {name: int(await conn.fetchval(f"SELECT count(*) FROM {rel}")) for name, rel in tables.items()}
        before = await _sizes(conn, tables)
        metric_cols = await _value_columns(conn, "gpu_samples", ("ts", "gpu", "node", "extra"))
        non_null = await _non_null(conn, "gpu_samples", metric_cols)
        proc_cols = await _value_columns(conn, "process_samples", ("ts", "gpu"))
        proc_non_null = await _non_null(conn, "process_samples", proc_cols)
        chunks_before = {name: await _chunks(conn, rel) for name, rel in tables.items()}
        # compress: the shipped policies, once each; then whatever they left, by hand
        t2 = time.perf_counter()
        policies = await _run_policies(conn)
        policy_s = round(time.perf_counter() - t2, 1)
        chunks_by_policy = {name: await _chunks(conn, rel) for name, rel in tables.items()}
        by_hand = {name: await _compress_rest(conn, rel) for name, rel in tables.items()}
        await conn.execute("VACUUM ANALYZE")
        after = await _sizes(conn, tables)
        stats = {}
        for name, rel in tables.items():
            row = await conn.fetchrow("SELECT * FROM hypertable_compression_stats($1::regclass)", rel)
            stats[name] = {k: (int(v) if isinstance(v, int) else v) for k, v in dict(row).items()} if row else None
        columns = {r: await _column_bytes(conn, r) for r in RAW}
        columns_1m = await _column_bytes(conn, mats["gpu_samples_1m_v2"])
        batches = {name: (columns[rel] if rel in columns else await _column_bytes(conn, rel))["batches"]
                   for name, rel in tables.items()}
        intervals = {name: str(await conn.fetchval(
            "SELECT time_interval::text FROM timescaledb_information.dimensions"
            " WHERE format('%I.%I', hypertable_schema, hypertable_name)::regclass = $1::regclass", rel))
            for name, rel in tables.items()}
        # value types: one 6-hour window of raw samples (a whole raw chunk of every GPU), the whole 1m rollup
        w0 = datetime.fromtimestamp(math.ceil(start.timestamp() / 21600) * 21600, UTC)
        value_types = await _value_types(conn, (w0, w0 + timedelta(hours=6)), mats["gpu_samples_1m_v2"]) \
            if not args.skip_value_types else None
        elapsed = round(time.perf_counter() - t, 1)
    finally:
        await conn.close()
    days = (end - start).total_seconds() / 86400
    samples = counts["gpu_samples"]
    values = sum(non_null.values())
    proc_values = sum(proc_non_null.values())

    def total(d: dict[str, dict[str, int]], names: Sequence[str]) -> int:
        return sum(d[n]["total_bytes"] for n in names)

    raw_before, raw_after = total(before, RAW), total(after, RAW)
    gs_before, gs_after = before["gpu_samples"]["total_bytes"], after["gpu_samples"]["total_bytes"]
    span = {name: days + (args.history_days if name in ROLLUPS_1H else 0) for name in tables}
    per_gpu_day = {name: {"before": before[name]["total_bytes"] / gpus / span[name],
                          "after": after[name]["total_bytes"] / gpus / span[name],
                          "ratio": before[name]["total_bytes"] / max(1, after[name]["total_bytes"])}
                   for name in tables}
    r1m_before = sum(per_gpu_day[v]["before"] for v in ROLLUPS_1M)
    r1m_after = sum(per_gpu_day[v]["after"] for v in ROLLUPS_1M)
    r1h_before = sum(per_gpu_day[v]["before"] for v in ROLLUPS_1H)
    r1h_after = sum(per_gpu_day[v]["after"] for v in ROLLUPS_1H)
    raw_day_after = raw_after / gpus / days
    raw_day_before = raw_before / gpus / days
    col_bytes = columns["gpu_samples"]["columns"]
    per_column = {c: {"compressed_bytes": col_bytes.get(c, 0), "non_null": non_null.get(c, 0),
                      "bytes_per_value": col_bytes.get(c, 0) / non_null[c] if non_null.get(c) else None}
                  for c in ["ts", "gpu", "node", *metric_cols, "extra"] if c in col_bytes or c in non_null}
    meta = {c: b for c, b in col_bytes.items() if c.startswith("_ts_meta")}
    per_table = {}
    for name in tables:
        rows = max(1, counts[name])
        # how many 1 Hz GPU-samples one row stands for: a raw row 1, a 1-minute row 60, a 1-hour row 3,600
        stands_for = 1 if name in RAW else 60 if name in ROLLUPS_1M else 3600
        per_table[name] = {
            "rows": counts[name], "chunk_interval": intervals[name], "chunks": chunks_by_policy[name][0],
            "batches": batches[name], "rows_per_batch": counts[name] / batches[name] if batches[name] else None,
            "bytes_before": before[name]["total_bytes"], "bytes_after": after[name]["total_bytes"],
            "bytes_per_row_before": before[name]["total_bytes"] / rows,
            "bytes_per_row_after": after[name]["total_bytes"] / rows,
            "ratio": before[name]["total_bytes"] / max(1, after[name]["total_bytes"]),
            "bytes_per_1hz_gpu_sample_after": after[name]["total_bytes"] / rows / stands_for,
        }
    return {
        "history": history, "per_table": per_table,
        "rows": counts, "refresh_seconds": refresh_s, "policies": policies, "policy_seconds": policy_s,
        "chunks_before": chunks_before, "chunks_after_policies": chunks_by_policy, "compressed_by_hand": by_hand,
        "sizes_before": before, "sizes_after": after, "compression_stats": stats,
        "raw": {
            "gpu_samples": samples, "process_rows": counts["process_samples"],
            "gpu_samples_values": values, "process_values": proc_values,
            "bytes_before": raw_before, "bytes_after": raw_after, "ratio": raw_before / raw_after,
            "bytes_per_gpu_sample_before": raw_before / samples, "bytes_per_gpu_sample_after": raw_after / samples,
            "gpu_samples_ratio": gs_before / gs_after,
            "gpu_samples_bytes_per_sample_after": gs_after / samples,
            "gpu_samples_bytes_per_value_after": gs_after / values,
            "process_samples_bytes_per_row_after": after["process_samples"]["total_bytes"]
            / max(1, counts["process_samples"]),
            "bytes_per_gpu_day_before": raw_day_before, "bytes_per_gpu_day_after": raw_day_after,
        },
        "gpu_samples_columns": {"batches": columns["gpu_samples"]["batches"], "per_column": per_column,
                                "metadata_columns": meta},
        "process_samples_columns": columns["process_samples"],
        "gpu_samples_1m_v2_columns": columns_1m,
        "rollups_per_gpu_day": per_gpu_day,
        "rollups": {
            "1m_bytes_per_gpu_day_before": r1m_before, "1m_bytes_per_gpu_day_after": r1m_after,
            "1h_bytes_per_gpu_day_before": r1h_before, "1h_bytes_per_gpu_day_after": r1h_after,
            "1m_90_days_per_gpu_before": 90 * r1m_before, "1m_90_days_per_gpu_after": 90 * r1m_after,
            "1h_2_years_per_gpu_after": 730 * r1h_after,
            "raw_14_days_per_gpu_compressed": 14 * raw_day_after,
            "1m_90d_compressed_vs_raw_14d_compressed": 90 * r1m_after / (14 * raw_day_after),
            "1m_90d_uncompressed_vs_raw_14d_compressed": 90 * r1m_before / (14 * raw_day_after),
        },
        "value_types": value_types, "measure_seconds": elapsed,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.bench_pipeline import _machine

    prep = asyncio.run(_prepare(args))
    dsn = prep["dsn"]
    seconds = int(args.days * 86400)
    # backdated so that every chunk, the rollups' 2.5-day ones included, is past its compress_after (9 days at most)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=args.age_days)
    start = end - timedelta(seconds=seconds)
    nodes = max(1, args.gpus // 8)
    workers = max(1, min(args.workers, nodes))
    shares = [nodes // workers + (1 if i < nodes % workers else 0) for i in range(workers)]
    t = time.perf_counter()
    jobs = []
    first = 0
    with ProcessPoolExecutor(workers) as pool:
        for i, n in enumerate(shares):
            jobs.append(pool.submit(_load_worker, dsn, first, n, seconds, start.timestamp(), args.seed + i))
            first += n
        loaded = [j.result() for j in jobs]
    load_s = time.perf_counter() - t
    measured = asyncio.run(_measure(dsn, start, end, nodes * 8, args))
    samples = sum(w["samples"] for w in loaded)
    return {
        "machine": _machine(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "dsn"}, **{k: v for k, v in prep.items() if k != "dsn"},
        "data": {"gpus": nodes * 8, "days": args.days, "start": start.isoformat(), "end": end.isoformat(),
                 "samples_written": samples, "workers": loaded, "load_seconds": round(load_s, 1),
                 "samples_per_second": round(samples / load_s)},
        **measured,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dsn", required=True, help="a TimescaleDB server (its database is used to create --db-name)")
    ap.add_argument("--db-name", default="gpuwatch_compression_bench", help="the benchmark's database (replaced)")
    ap.add_argument("--gpus", type=int, default=32, help="GPUs (nodes of 8)")
    ap.add_argument("--days", type=float, default=2.5, help="days of 1 Hz samples per GPU")
    ap.add_argument("--age-days", type=float, default=12.0, help="how far back the data end")
    ap.add_argument("--workers", type=int, default=2, help="loader processes")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--skip-value-types", action="store_true")
    ap.add_argument("--history-days", type=float, default=0.0,
                    help="fill the 1-hour rollups this many days back with copies of the loaded window's hours")
    ap.add_argument("--version", help="create the timescaledb extension at this version (default: the server's)")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark's database afterwards")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = run(args)
    if not args.keep:
        asyncio.run(_drop(args))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


async def _drop(args: argparse.Namespace) -> None:
    import asyncpg

    admin = await asyncpg.connect(args.dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
    finally:
        await admin.close()


if __name__ == "__main__":
    sys.exit(main())
