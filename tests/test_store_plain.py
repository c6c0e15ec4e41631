"""The store on plain PostgreSQL (the profile CI can run end to end, ingestion included).

Every test gets a fresh database on the session's real PostgreSQL server (``pg_db``),
and opens the store with an explicit ``now`` where partitions or retention matter, so
the results do not depend on the wall clock.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.store import BadRecord, MigrationError, ProfileMismatch, Store, WriteResult, validate
from collector.store import schema as S
from collector.store.migrate import load_migrations
from telemetry.catalog import CATALOG
from telemetry.records import EventRecord, GpuRecord, ProcessRecord
from tests.fixtures_pg import PgServer

T = TypeVar("T")

#: A fixed time far from the wall clock (the trace generator's start): 2025-11-30 08:00 UTC.
T0 = datetime(2025, 11, 30, 8, 0, tzinfo=UTC)
GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def with_store(dsn: str, body: Callable[[Store], Awaitable[T]], *, now: datetime = T0) -> T:
    """Open a store on ``dsn`` (partitions around ``now``), run ``body``, close it."""

    async def main() -> T:
        store = await Store.open(dsn, now=now)
        try:
            return await body(store)
        finally:
            await store.close()

    return run(main())


def record(
    gpu: str,
    ts: datetime,
    metrics: dict[str, float],
    *,
    node: str = "node-a",
    processes: list[ProcessRecord] | None = None,
    **kw: Any,
) -> GpuRecord:
    return GpuRecord(ts=ts.timestamp(), node=node, gpu=gpu, metrics=metrics, processes=processes or [], **kw)


def hand_made_series(gpu: str, start: datetime) -> list[GpuRecord]:
    """Two minutes at 1 Hz with known aggregates.

    GPU_UTIL = i (minute averages 29.5 and 89.5, 2-minute average 59.5), GPU_TEMP = 50
    except a 90 °C spike at i = 70, POWER_USAGE = 100.5 only on even seconds (odd ones
    lack it: NULL, not 0), ENERGY counter = 1000 * i, CLOCKS_EVENT_REASONS 0x4 at i = 10
    and 0x40 at i = 20 (minute 0's bit_or = 0x44), one process (sm_util = i % 10).
    """
    out: list[GpuRecord] = []
    for i in range(120):
        metrics: dict[str, float] = {
            "DCGM_FI_DEV_GPU_UTIL": i,
            "DCGM_FI_DEV_GPU_TEMP": 90 if i == 70 else 50,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1000 * i,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": {10: 0x4, 20: 0x40}.get(i, 0),
        }
        if i % 2 == 0:
            metrics["DCGM_FI_DEV_POWER_USAGE"] = 100.5
        proc = ProcessRecord(pid=4242, name="python", namespace="ml", pod="trainer-0", container="main",
                             service="llm", sm_util=float(i % 10), mem_util=5.0, used_memory_mib=1000.0 + i)
        out.append(record(gpu, start + timedelta(seconds=i), metrics, processes=[proc], model="NVIDIA H200"))
    return out


async def column_types(conn: Any, table: str) -> dict[str, str]:
    rows = await conn.fetch(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a "
        "WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        table,
    )
    return {r["attname"]: r["type"] for r in rows}


# --------------------------------------------------------------------------------------
# migrations
# --------------------------------------------------------------------------------------


def test_migrations_apply_once_and_rerun_as_noop(pg_db: str) -> None:
    async def body(store: Store) -> list[Any]:
        assert store.profile == "plain"
        return list(await store.pool.fetch("SELECT version, name, profile, applied_at FROM schema_migrations"))

    first = with_store(pg_db, body)
    second = with_store(pg_db, body)
    assert [r["version"] for r in first] == [m.version for m in load_migrations("plain")]
    assert {r["profile"] for r in first} == {"plain"}
    assert first == second  # nothing re-applied: same rows, same applied_at


def test_replicas_starting_together_migrate_once(pg_db: str) -> None:
    async def main() -> list[int]:
        stores = await asyncio.gather(*(Store.open(pg_db, now=T0) for _ in range(4)))
        try:
            rows = await stores[0].pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
            return [r["version"] for r in rows]
        finally:
            await asyncio.gather(*(s.close() for s in stores))

    assert run(main()) == [m.version for m in load_migrations("plain")]


def test_other_profile_is_refused(pg_db: str) -> None:
    with_store(pg_db, lambda store: asyncio.sleep(0))
    with pytest.raises(ProfileMismatch, match="set up with the 'plain' storage profile"):
        run(Store.open(pg_db, profile="timescale"))


def test_timescale_asked_for_without_the_extension_fails_clearly(pg_db: str) -> None:
    with pytest.raises(MigrationError, match="timescaledb extension is not available"):
        run(Store.open(pg_db, profile="timescale"))


def test_an_applied_migration_that_changed_is_refused(pg_db: str) -> None:
    async def tamper(store: Store) -> None:
        await store.pool.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 2")

    with_store(pg_db, tamper)
    with pytest.raises(MigrationError, match="applied migrations must not change"):
        run(Store.open(pg_db))


def test_schema_columns_equal_the_catalog(pg_db: str) -> None:
    async def body(store: Store) -> dict[str, dict[str, str]]:
        async with store.pool.acquire() as conn:
            return {t: await column_types(conn, t) for t in
                    ("gpu_samples", "process_samples", "gpu_samples_1m", "gpu_samples_1h", "process_samples_1m")}

    tables = with_store(pg_db, body)
    # Straight from the catalog, not through collector.store.schema: one column per
    # metric, lower-case key, bigint for exact integers, double precision for floats.
    expected = {m.key.lower(): ("bigint" if m.resolution == 0 else "double precision") for m in CATALOG}
    raw = tables["gpu_samples"]
    assert {k: v for k, v in raw.items() if k not in ("ts", "gpu", "node", "extra")} == expected
    # the DCGM columns of migration 0002, then extra; gpuwatch's own rows (issue 14: host evidence, 0060;
    # inference servers, 0061) come after "extra": ALTER TABLE appends
    dcgm = [key for key in expected if key.startswith("dcgm_")]
    assert list(raw) == ["ts", "gpu", "node", *dcgm, "extra", *(key for key in expected if key not in dcgm)]
    assert raw == S.SAMPLE_COLUMNS
    assert tables["process_samples"] == S.PROCESS_COLUMNS
    assert tables["gpu_samples_1m"] == S.GPU_ROLLUP_COLUMNS
    assert tables["gpu_samples_1h"] == S.GPU_ROLLUP_COLUMNS
    assert tables["process_samples_1m"] == S.PROCESS_ROLLUP_COLUMNS
    for m in CATALOG:  # every metric has a rollup column
        assert m.key.lower() in tables["gpu_samples_1m"]


# --------------------------------------------------------------------------------------
# writes
# --------------------------------------------------------------------------------------


def test_write_and_read_back(pg_db: str) -> None:
    metrics: dict[str, float] = {
        "DCGM_FI_DEV_GPU_UTIL": 91,
        "DCGM_FI_DEV_FB_USED": 59500.0,  # an integral float for an integer metric
        "DCGM_FI_DEV_POWER_USAGE": 612.345,
        "DCGM_FI_PROF_SM_ACTIVE": 0.8712,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 2**62 + 1,  # exact beyond float precision
        "DCGM_FI_PROF_DRAM_ACTIVE": math.nan,  # the contract's missing reading
        "DCGM_FI_PROF_PCIE_TX_BYTES": math.inf,  # a broken reading: stored as missing
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 1,  # not in the catalog -> extra
        "CUSTOM_RATIO": 0.25,
    }
    rec = record(GPU_A, T0 + timedelta(seconds=1.5), metrics, model="NVIDIA H200", driver_version="580.1",
                 pci_bus_id="00000000:18:00.0", processes=[
                     ProcessRecord(pid=7, name="python", namespace="ml", pod="p-0", container="c", service="svc",
                                   used_memory_mib=512.0, sm_util=40.0, mem_util=3.0),
                     ProcessRecord(pid=8),
                 ])

    async def body(store: Store) -> tuple[WriteResult, Any, list[Any]]:
        result = await store.write([rec])
        row = await store.pool.fetchrow("SELECT * FROM gpu_samples")
        procs = await store.pool.fetch("SELECT * FROM process_samples ORDER BY pid")
        return result, row, list(procs)

    result, row, procs = with_store(pg_db, body)
    assert result == WriteResult(samples_new=1, samples_dup=0, processes_new=2, events_new=0)
    assert row["ts"] == T0 + timedelta(seconds=1.5)
    assert (row["gpu"], row["node"]) == (GPU_A, "node-a")
    assert row["dcgm_fi_dev_gpu_util"] == 91 and isinstance(row["dcgm_fi_dev_gpu_util"], int)
    assert row["dcgm_fi_dev_fb_used"] == 59500
    assert row["dcgm_fi_dev_total_energy_consumption"] == 2**62 + 1
    assert row["dcgm_fi_dev_power_usage"] == 612.345  # double precision: exact to far below 0.001 W
    assert row["dcgm_fi_prof_sm_active"] == 0.8712
    assert row["dcgm_fi_prof_dram_active"] is None
    assert row["dcgm_fi_prof_pcie_tx_bytes"] is None
    absent = [m.key.lower() for m in CATALOG if m.key not in metrics]
    assert absent and all(row[c] is None for c in absent)  # absent is NULL, never 0
    assert json.loads(row["extra"]) == {"DCGM_FI_DEV_VGPU_LICENSE_STATUS": 1, "CUSTOM_RATIO": 0.25}
    assert [p["pid"] for p in procs] == [7, 8]
    assert dict(procs[0]) | {"ts": None} == {
        "ts": None, "gpu": GPU_A, "pid": 7, "name": "python", "namespace": "ml", "pod": "p-0",
        "container": "c", "service": "svc", "used_memory_mib": 512.0, "sm_util": 40.0, "mem_util": 3.0,
    }
    assert procs[1]["service"] is None and procs[1]["sm_util"] is None


_metric_values = st.fixed_dictionaries({}, optional={
    m.key: (st.integers(-(2**63), 2**63 - 1) if m.resolution == 0
            else st.floats(allow_nan=False, allow_infinity=False))
    for m in CATALOG
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_metric_values, min_size=1, max_size=5))
def test_any_storable_values_read_back_exactly(pg_db: str, batch: list[dict[str, float]]) -> None:
    gpu = f"GPU-{uuid.uuid4()}"
    records = [record(gpu, T0 + timedelta(milliseconds=i), metrics) for i, metrics in enumerate(batch)]

    async def body(store: Store) -> list[Any]:
        assert await store.write(records) == WriteResult(len(records), 0, 0, 0)
        return list(await store.pool.fetch("SELECT * FROM gpu_samples WHERE gpu = $1 ORDER BY ts", gpu))

    rows = with_store(pg_db, body)
    for metrics, row in zip(batch, rows, strict=True):
        assert {m.key: row[m.key.lower()] for m in CATALOG if row[m.key.lower()] is not None} == metrics


def test_redelivery_adds_no_rows(pg_db: str) -> None:
    batch = hand_made_series(GPU_A, T0)[:30]
    overlapping = hand_made_series(GPU_A, T0)[20:40]

    async def body(store: Store) -> list[Any]:
        results: list[Any] = [await store.write(batch), await store.write(batch), await store.write(overlapping)]
        results.append(await store.write(batch + batch))  # duplicates inside one batch too
        results.append(await store.pool.fetchval("SELECT count(*) FROM gpu_samples"))
        results.append(await store.pool.fetchval("SELECT count(*) FROM process_samples"))
        return results

    first, again, overlap, doubled, samples, processes = with_store(pg_db, body)
    assert first == WriteResult(30, 0, 30, 0)
    assert again == WriteResult(0, 30, 0, 0)
    assert overlap == WriteResult(10, 10, 10, 0)
    assert doubled == WriteResult(0, 60, 0, 0)
    assert (samples, processes) == (40, 40)


def test_events_are_idempotent_too(pg_db: str) -> None:
    events = [
        EventRecord(T0.timestamp(), "node-a", GPU_A, "xid", 79, "GPU has fallen off the bus"),
        EventRecord(T0.timestamp(), "node-a", GPU_A, "xid", 13),
        EventRecord(T0.timestamp(), "node-a", GPU_A, "throttle_start", None, "HW_THERMAL"),
        EventRecord(T0.timestamp() + 60, "node-a", GPU_A, "throttle_end", None),
    ]

    async def body(store: Store) -> tuple[WriteResult, WriteResult, list[Any]]:
        first = await store.write([], events)
        second = await store.write([], events)
        rows = await store.pool.fetch("SELECT kind, code, detail FROM events ORDER BY ts, kind, code")
        return first, second, list(rows)

    first, second, rows = with_store(pg_db, body)
    assert first.events_new == 4 and second.events_new == 0
    assert [tuple(r) for r in rows] == [
        ("throttle_start", None, "HW_THERMAL"), ("xid", 13, ""), ("xid", 79, "GPU has fallen off the bus"),
        ("throttle_end", None, ""),
    ]


def test_inventory_keeps_first_and_last_seen_and_the_newest_description(pg_db: str) -> None:
    base = {"DCGM_FI_DEV_GPU_UTIL": 1}
    newer = [record(GPU_A, T0 + timedelta(hours=1), base, model="NVIDIA H200", driver_version="580.2"),
             record(GPU_B, T0 + timedelta(hours=1), base, node="node-b", model="NVIDIA H100",
                    mig_profile="1g.18gb", parent_gpu=GPU_A)]
    older = [record(GPU_A, T0, base, node="node-old", model="old-name", driver_version="570.0",
                    pci_bus_id="00000000:18:00.0")]

    async def body(store: Store) -> dict[str, Any]:
        await store.write(newer)
        await store.write(older)  # late, redelivered batch: widens first_seen, describes nothing newer
        rows = await store.pool.fetch("SELECT * FROM gpu_inventory")
        return {r["gpu"]: dict(r) for r in rows}

    inv = with_store(pg_db, body)
    a = inv[GPU_A]
    assert (a["first_seen"], a["last_seen"]) == (T0, T0 + timedelta(hours=1))
    assert (a["node"], a["model"], a["driver_version"]) == ("node-a", "NVIDIA H200", "580.2")
    assert a["pci_bus_id"] == "00000000:18:00.0"  # only the old batch knew it: gaps are filled
    b = inv[GPU_B]
    assert (b["node"], b["model"], b["mig_profile"], b["parent_gpu"]) == ("node-b", "NVIDIA H100", "1g.18gb", GPU_A)


# --------------------------------------------------------------------------------------
# bad records
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "kw", "field"),
    [
        ({"DCGM_FI_DEV_GPU_UTIL": 2**63}, {}, "metrics.DCGM_FI_DEV_GPU_UTIL"),
        ({"DCGM_FI_DEV_FB_USED": 1.5}, {}, "metrics.DCGM_FI_DEV_FB_USED"),
        ({"DCGM_FI_DEV_FB_USED": math.inf}, {}, "metrics.DCGM_FI_DEV_FB_USED"),
        ({"DCGM_FI_DEV_GPU_TEMP": True}, {}, "metrics.DCGM_FI_DEV_GPU_TEMP"),
        ({"DCGM_FI_DEV_POWER_USAGE": 10**400}, {}, "metrics.DCGM_FI_DEV_POWER_USAGE"),
        ({"SOMETHING_ELSE": "x"}, {}, "metrics.SOMETHING_ELSE"),
        ({}, {"model": "H200\x00"}, "model"),
        ({}, {"processes": [ProcessRecord(pid=2**40)]}, "processes[0].pid"),
        ({}, {"processes": [ProcessRecord(pid=1, pod="p\ud800")]}, "processes[0].pod"),
    ],
)
def test_bad_record_names_gpu_ts_and_field(metrics: dict[str, Any], kw: dict[str, Any], field: str) -> None:
    rec = record(GPU_A, T0, metrics, **kw)
    with pytest.raises(BadRecord) as info:
        validate(rec)
    assert info.value.field == field
    assert info.value.gpu == GPU_A and info.value.ts == T0.timestamp()
    assert GPU_A in str(info.value) and field in str(info.value)


def test_bad_timestamp_is_a_bad_record() -> None:
    for ts in (math.inf, 1e20):
        with pytest.raises(BadRecord, match="field ts"):
            validate(GpuRecord(ts=ts, node="n", gpu=GPU_A, metrics={}))


def test_a_batch_with_one_bad_record_writes_nothing(pg_db: str) -> None:
    good = hand_made_series(GPU_A, T0)[:5]
    bad = record(GPU_B, T0, {"DCGM_FI_DEV_GPU_UTIL": 1.25})
    bad_event = EventRecord(T0.timestamp(), "node-a", GPU_A, "xid", 2**40)

    async def body(store: Store) -> int:
        with pytest.raises(BadRecord, match=r"GPU-bbbb.*metrics\.DCGM_FI_DEV_GPU_UTIL"):
            await store.write([*good, bad])
        with pytest.raises(BadRecord, match=r"event\.code"):
            await store.write(good, [bad_event])
        return int(await store.pool.fetchval("SELECT count(*) FROM gpu_samples"))

    assert with_store(pg_db, body) == 0


# --------------------------------------------------------------------------------------
# partitions, rollups, retention
# --------------------------------------------------------------------------------------


async def partitions(store: Store, table: str) -> list[str]:
    rows = await store.pool.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = $1::text::regclass ORDER BY 1", table,
    )
    return [r["relname"] for r in rows]


def test_partitions_ahead_and_default_for_anything_else(pg_db: str) -> None:
    far_future = T0 + timedelta(days=10, hours=3)
    far_past = T0 - timedelta(days=3)  # before the partitions made at open, within retention

    async def body(store: Store) -> dict[str, Any]:
        out: dict[str, Any] = {"at_open": await partitions(store, "gpu_samples")}
        await store.write([record(GPU_A, T0, {"DCGM_FI_DEV_GPU_UTIL": 1}),
                           record(GPU_A, far_future, {"DCGM_FI_DEV_GPU_UTIL": 2}),
                           record(GPU_A, far_past, {"DCGM_FI_DEV_GPU_UTIL": 3})])
        where = "SELECT tableoid::regclass::text AS part, dcgm_fi_dev_gpu_util AS v FROM gpu_samples ORDER BY v"
        out["before"] = [tuple(r) for r in await store.pool.fetch(where)]
        await store.maintain(far_future)  # makes the future day's partition: its row moves out of DEFAULT
        out["after"] = [tuple(r) for r in await store.pool.fetch(where)]
        return out

    out = with_store(pg_db, body)
    assert out["at_open"] == ["gpu_samples_default"] + [
        f"gpu_samples_p{T0 + timedelta(days=k):%Y%m%d}" for k in range(-2, 3)]
    assert out["before"] == [("gpu_samples_p20251130", 1), ("gpu_samples_default", 2), ("gpu_samples_default", 3)]
    assert out["after"] == [("gpu_samples_p20251130", 1), ("gpu_samples_p20251210", 2), ("gpu_samples_default", 3)]


def test_rollups_from_a_hand_made_series(pg_db: str) -> None:
    series = hand_made_series(GPU_A, T0)

    async def body(store: Store) -> dict[str, Any]:
        await store.write(series[:60])
        await store.write(series[60:])
        await store.maintain(T0 + timedelta(minutes=5))
        out: dict[str, Any] = {
            "1m": [dict(r) for r in await store.pool.fetch("SELECT * FROM gpu_samples_1m ORDER BY bucket")],
            "1h": [dict(r) for r in await store.pool.fetch("SELECT * FROM gpu_samples_1h")],
            "proc": [dict(r) for r in await store.pool.fetch("SELECT * FROM process_samples_1m ORDER BY bucket")],
            "pending": await store.pool.fetchval("SELECT count(*) FROM rollup_pending"),
        }
        # A late sample for minute 0 (e.g. from an agent's spool): the next round folds it in.
        await store.write([record(GPU_A, T0 + timedelta(seconds=30.5), {"DCGM_FI_DEV_GPU_UTIL": 640})])
        await store.maintain(T0 + timedelta(minutes=6))
        out["late"] = await store.pool.fetchrow(
            "SELECT samples, dcgm_fi_dev_gpu_util FROM gpu_samples_1m WHERE bucket = $1", T0)
        out["late_1h"] = await store.pool.fetchval("SELECT samples FROM gpu_samples_1h")
        return out

    out = with_store(pg_db, body)
    m0, m1 = out["1m"]
    assert (m0["bucket"], m1["bucket"]) == (T0, T0 + timedelta(minutes=1))
    assert (m0["samples"], m1["samples"], m0["node"]) == (60, 60, "node-a")
    assert (m0["dcgm_fi_dev_gpu_util"], m1["dcgm_fi_dev_gpu_util"]) == (29.5, 89.5)
    assert (m0["dcgm_fi_dev_gpu_temp"], m0["dcgm_fi_dev_gpu_temp_max"]) == (50.0, 50)
    assert m1["dcgm_fi_dev_gpu_temp"] == pytest.approx(50 + 40 / 60) and m1["dcgm_fi_dev_gpu_temp_max"] == 90
    assert m0["dcgm_fi_dev_power_usage"] == 100.5  # averaged over the samples that had it
    assert (m0["dcgm_fi_dev_total_energy_consumption"], m1["dcgm_fi_dev_total_energy_consumption"]) == (59000, 119000)
    assert (m0["dcgm_fi_dev_clocks_event_reasons"], m1["dcgm_fi_dev_clocks_event_reasons"]) == (0x44, 0)
    assert m0["dcgm_fi_prof_sm_active"] is None  # no sample had it
    (h,) = out["1h"]
    assert (h["bucket"], h["samples"], h["dcgm_fi_dev_gpu_util"]) == (T0, 120, 59.5)
    assert (h["dcgm_fi_dev_gpu_temp_max"], h["dcgm_fi_dev_clocks_event_reasons"]) == (90, 0x44)
    assert h["dcgm_fi_dev_total_energy_consumption"] == 119000
    p0, p1 = out["proc"]
    assert (p0["namespace"], p0["pod"], p0["service"], p0["samples"]) == ("ml", "trainer-0", "llm", 60)
    assert (p0["sm_util"], p0["used_memory_mib_max"], p1["used_memory_mib_max"]) == (4.5, 1059.0, 1119.0)
    assert out["pending"] == 0
    assert out["late"]["samples"] == 61
    assert out["late"]["dcgm_fi_dev_gpu_util"] == pytest.approx((29.5 * 60 + 640) / 61)
    assert out["late_1h"] == 121


def test_retention_drops_old_partitions_and_rollups(pg_db: str) -> None:
    series = hand_made_series(GPU_A, T0)[:10]

    async def counts(store: Store) -> tuple[int, int, int, int]:
        q = "SELECT (SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM process_samples), " \
            "(SELECT count(*) FROM gpu_samples_1m), (SELECT count(*) FROM gpu_samples_1h)"
        row = await store.pool.fetchrow(q)
        return (row[0], row[1], row[2], row[3])

    async def body(store: Store) -> dict[str, Any]:
        await store.write(series)
        await store.write([record(GPU_B, T0 - timedelta(days=40), {"DCGM_FI_DEV_GPU_UTIL": 1})])  # -> DEFAULT
        out: dict[str, Any] = {"written": await counts(store)}
        await store.maintain(T0 + timedelta(hours=1))
        out["fresh"] = await counts(store)
        await store.maintain(T0 + timedelta(days=14, hours=1))  # T0's day ends 14 d 16 h before: kept
        out["day14"] = await counts(store)
        await store.maintain(T0 + timedelta(days=20))
        out["day20"] = await counts(store)
        out["parts"] = await partitions(store, "gpu_samples")
        await store.maintain(T0 + timedelta(days=91))
        out["day91"] = await counts(store)
        await store.maintain(T0 + timedelta(days=731))
        out["day731"] = await counts(store)
        return out

    out = with_store(pg_db, body)
    assert out["written"] == (11, 10, 0, 0)
    assert out["fresh"] == (10, 10, 1, 1)  # DEFAULT's 40-day-old row is past retention: deleted, not rolled up
    assert out["day14"] == (10, 10, 1, 1)
    assert out["day20"] == (0, 0, 1, 1)
    assert "gpu_samples_p20251130" not in out["parts"]
    # made at open (T0 +- 2 d, all dropped) and by the rounds at day 14 and day 20 (each +- 2 d)
    assert out["parts"] == ["gpu_samples_default"] + [
        f"gpu_samples_p{T0 + timedelta(days=k):%Y%m%d}" for k in (12, 13, 14, 15, 16, 18, 19, 20, 21, 22)]
    assert out["day91"] == (0, 0, 0, 1)
    assert out["day731"] == (0, 0, 0, 0)


# --------------------------------------------------------------------------------------
# read queries
# --------------------------------------------------------------------------------------


def test_gpu_series_chooses_raw_1m_or_1h_by_step(pg_db: str) -> None:
    series = hand_made_series(GPU_A, T0)
    util = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    end = T0 + timedelta(hours=1)

    async def body(store: Store) -> dict[str, Any]:
        await store.write(series)
        await store.maintain(T0 + timedelta(minutes=5))
        return {
            "10s": await store.gpu_series(GPU_A, util, T0, end, timedelta(seconds=10)),
            "90s": await store.gpu_series(GPU_A, util, T0, end, timedelta(seconds=90)),
            "1m": await store.gpu_series(GPU_A, util, T0 + timedelta(seconds=20), end, timedelta(minutes=1)),
            "2m": await store.gpu_series(GPU_A, util, T0, end, timedelta(minutes=2)),
            "1h": await store.gpu_series(GPU_A, util, T0, end, timedelta(hours=1)),
            "1d": await store.gpu_series(GPU_A, util, T0, end, timedelta(days=1)),
            "raw_2m": await store.gpu_series(GPU_A, util, T0, end, timedelta(minutes=2), source="raw"),
            "other": await store.gpu_series(GPU_B, util, T0, end, timedelta(minutes=1)),
        }

    out = with_store(pg_db, body)
    s10 = out["10s"]
    assert s10.source == "raw" and len(s10.times) == 12
    assert s10.values["DCGM_FI_DEV_GPU_UTIL"][:2] == [4.5, 14.5]
    assert s10.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][:2] == [9000, 19000]
    assert out["90s"].source == "raw" and out["90s"].values["DCGM_FI_DEV_GPU_UTIL"] == [44.5, 104.5]
    s1m = out["1m"]
    assert s1m.source == "1m" and s1m.times == [T0, T0 + timedelta(minutes=1)]  # start snaps to its bucket
    assert s1m.values["DCGM_FI_DEV_GPU_UTIL"] == [29.5, 89.5]
    assert out["2m"].source == "1m" and out["2m"].values["DCGM_FI_DEV_GPU_UTIL"] == [59.5]
    assert out["2m"].values == out["raw_2m"].values and out["raw_2m"].source == "raw"
    assert out["1h"].source == "1h" and out["1h"].values["DCGM_FI_DEV_GPU_UTIL"] == [59.5]
    d = out["1d"]
    assert d.source == "1h" and d.times == [datetime(2025, 11, 30, tzinfo=UTC)]
    assert d.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == [119000]
    assert out["other"].times == [] and out["other"].values == {m: [] for m in util}


def test_gpu_series_rejects_unknown_metrics(pg_db: str) -> None:
    async def body(store: Store) -> None:
        with pytest.raises(ValueError, match="unknown metrics"):
            await store.gpu_series(GPU_A, ["dcgm_fi_dev_gpu_util; DROP TABLE events"], T0, T0, timedelta(minutes=1))
        with pytest.raises(ValueError, match="step"):
            await store.gpu_series(GPU_A, ["DCGM_FI_DEV_GPU_UTIL"], T0, T0, timedelta(0))

    with_store(pg_db, body)


def test_latest_per_gpu(pg_db: str) -> None:
    async def body(store: Store) -> Any:
        other = record(GPU_B, T0, {"DCGM_FI_DEV_GPU_UTIL": 5, "X_CUSTOM": 2}, node="node-b")
        await store.write([*hand_made_series(GPU_A, T0)[:3], other])
        return await store.latest_per_gpu(), await store.latest_per_gpu(["DCGM_FI_DEV_GPU_TEMP"])

    full, temps = with_store(pg_db, body)
    assert [(x.gpu, x.node, x.ts) for x in full] == [
        (GPU_A, "node-a", T0 + timedelta(seconds=2)), (GPU_B, "node-b", T0)]
    assert full[0].model == "NVIDIA H200"
    assert full[0].metrics["DCGM_FI_DEV_GPU_UTIL"] == 2 and "DCGM_FI_PROF_SM_ACTIVE" not in full[0].metrics
    assert full[1].metrics == {"DCGM_FI_DEV_GPU_UTIL": 5, "X_CUSTOM": 2}
    assert [x.metrics for x in temps] == [{"DCGM_FI_DEV_GPU_TEMP": 50}, {}]


# --------------------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------------------


def test_write_fails_during_a_restart_and_works_after(pg_server: PgServer, pg_db: str) -> None:
    series = hand_made_series(GPU_A, T0)

    async def main() -> list[Any]:
        store = await Store.open(pg_db, now=T0, max_size=2)
        try:
            first = await store.write(series[:10])
            pg_server.stop()
            with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
                await store.write(series[10:20])
            with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
                await store.write(series[10:20])  # still down: a fresh connection is refused
            pg_server.start()
            retried = await store.write(series[10:20])  # the consumer's retry of the same batch
            redelivered = await store.write(series[:20])
            count = await store.pool.fetchval("SELECT count(*) FROM gpu_samples")
            return [first, retried, redelivered, count]
        finally:
            pg_server.start()
            await store.close()

    first, retried, redelivered, count = run(main())
    assert first == WriteResult(10, 0, 10, 0)
    assert retried == WriteResult(10, 0, 10, 0)
    assert redelivered == WriteResult(0, 20, 0, 0)
    assert count == 20


# --------------------------------------------------------------------------------------
# ingestion: a simulated fleet
# --------------------------------------------------------------------------------------


def test_ingest_8_gpus_for_10_minutes(pg_db: str) -> None:
    from agent.simulate.trace import T0 as TRACE_T0
    from agent.simulate.trace import generate_trace

    records = list(generate_trace(gpus=8, seconds=600))
    assert len(records) == 8 * 600
    processes = sum(len(r.processes) for r in records)
    assert processes > 0 and any(p.service for r in records for p in r.processes)
    start = datetime.fromtimestamp(TRACE_T0, UTC)

    async def body(store: Store) -> dict[str, Any]:
        total = WriteResult()
        for i in range(0, len(records), 80):  # 10 s of the fleet per batch
            total += await store.write(records[i:i + 80])
        again = await store.write(records[:800])
        await store.maintain(start + timedelta(minutes=11))
        q = store.pool.fetchval
        return {
            "total": total, "again": again,
            "samples": await q("SELECT count(*) FROM gpu_samples"),
            "default": await q("SELECT count(*) FROM gpu_samples_default"),
            "processes": await q("SELECT count(*) FROM process_samples"),
            "with_service": await q("SELECT count(*) FROM process_samples WHERE service IS NOT NULL"),
            "inventory": await q("SELECT count(*) FROM gpu_inventory"),
            "1m": await q("SELECT count(*) FROM gpu_samples_1m"),
            "1m_samples": await q("SELECT sum(samples) FROM gpu_samples_1m"),
            "1h_samples": await q("SELECT sum(samples) FROM gpu_samples_1h"),
            "proc_1m_samples": await q("SELECT sum(samples) FROM process_samples_1m"),
            "null_util": await q("SELECT count(*) FROM gpu_samples WHERE dcgm_fi_dev_gpu_util IS NULL"),
        }

    out = with_store(pg_db, body, now=start)
    assert out["total"] == WriteResult(4800, 0, processes, 0)
    assert out["again"] == WriteResult(0, 800, 0, 0)
    assert (out["samples"], out["default"], out["processes"]) == (4800, 0, processes)
    assert out["with_service"] == sum(1 for r in records for p in r.processes if p.service is not None)
    assert out["inventory"] == 8
    assert (out["1m"], out["1m_samples"], out["1h_samples"]) == (80, 4800, 4800)
    assert out["proc_1m_samples"] == processes
    assert out["null_util"] == 0


def test_double_columns_read_back_exactly_through_the_text_the_timescale_profile_reads_real_ones_by(
        pg_db: str) -> None:
    """The read queries take a metric that TimescaleDB stores as ``real`` through its text (so it
    reads as the decimal stored); on the plain profile's double columns that text round-trips
    exactly, to the last bit (collector.store.schema.read_sql)."""
    gpu = "GPU-66666666-0000-4000-8000-000000000001"
    values = {"DCGM_FI_PROF_SM_ACTIVE": 0.1234567890123456, "DCGM_FI_DEV_POWER_USAGE": 312.70000000000005}

    async def body(store: Store) -> Any:
        await store.write([record(gpu, T0, values)])
        return [x.metrics for x in await store.latest_per_gpu(list(values)) if x.gpu == gpu]

    assert with_store(pg_db, body) == [values]
