"""The kernel tables (migration 0070) on both profiles: stored once, read back per service within a scope.

Why real databases: idempotent redelivery is ``ON CONFLICT`` on the tables' unique keys, retention
is the plain profile's day partitions or TimescaleDB's policies, and the API's figures are SQL
sums; a fake would restate our assumptions. The TimescaleDB profile runs on PGlite
(tests/test_store_timescale.py says how), where policies run in the foreground.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from collector.store import Store, StoreRefused
from collector.store import kernels as K
from telemetry.kernels import UNATTRIBUTED, KernelStat, KernelWindow
from tests.support.kernel_windows import ADD, ATTENTION, GEMM, TRAIN_NS, training
from tests.test_store_plain import T0, with_store
from tests.test_store_timescale import pglite_dsn
from tests.test_store_timescale import with_store as with_ts_store

__all__ = ["pglite_dsn"]  # the module-scoped PGlite server fixture


def _windows(t0: datetime) -> list[KernelWindow]:
    """Three windows of research/llm (two processes), one of prod/llm (a same-named service elsewhere)."""
    s = t0.timestamp()
    return [training(s), training(s + 10, scale=2), training(s + 5, pid=4243, pod="trainer-1"),
            training(s + 20, pid=7, node="node-b", namespace="prod", pod="serve-0")]


async def _reads(store: Store, t0: datetime, scope: list[str] | None = None) -> dict[str, Any]:
    sel = K.Selection("llm", t0 - timedelta(minutes=1), t0 + timedelta(minutes=1), scope=scope)
    top = await K.top_kernels(store.pool, sel, 2)
    per, total = await K.trend(store.pool, sel, [k.name for k in top.kernels], 12)
    return {"totals": await K.totals(store.pool, sel), "top": top, "per": per, "total": total,
            "copies": await K.copies(store.pool, sel), "buckets": await K.buckets(store.pool, sel, 12),
            "short": await K.short_kernels(store.pool, sel), "stacks": await K.stacks(store.pool, sel)}


def _check_reads(out: dict[str, Any], t0: datetime) -> None:
    t = out["totals"]
    assert (t.windows, t.processes, t.pods, t.nodes) == (4, 3, 3, 2)  # pid 4242 sent two windows
    assert t.recorded_s == 4.0 and t.first == t0 and t.last == t0 + timedelta(seconds=21)
    assert t.kernel_ns == 3_800_000_000 and t.sync_calls == 800 and t.idle_gaps == 2000
    top = out["top"]
    assert [k.name for k in top.kernels] == [GEMM, ATTENTION]  # limit 2, heaviest first
    gemm = top.kernels[0]
    assert (gemm.calls, gemm.total_ns, gemm.windows, gemm.category) == (4000, 5 * TRAIN_NS[GEMM], 4, "gemm")
    assert (gemm.grid, gemm.block, gemm.registers, gemm.shared_bytes, gemm.occupancy) == (
        (132, 1, 1), (384, 1, 1), 168, 213_000, 0.375)
    assert (top.all_ns, top.all_calls, top.all_short_calls, top.names) == (t.kernel_ns, 44_400, 36_000, 3)
    # 10 s buckets from t0 - 60 s: the windows at +0 and +5 s in bucket 6, +10 s in 7, +20 s in 8
    assert out["total"] == [0] * 6 + [1_600_000_000, 1_400_000_000, 800_000_000] + [0] * 3
    assert out["per"][GEMM][6:9] == [2 * TRAIN_NS[GEMM], 2 * TRAIN_NS[GEMM], TRAIN_NS[GEMM]]
    assert [(c.kind, c.memory, c.calls, c.bytes) for c in out["copies"]] == [
        ("HtoD", "pageable", 400, 800 << 20), ("HtoD", "pinned", 40, 200 << 20), ("DtoH", "pinned", 4000, 16_000)]
    assert [(b.index, b.windows, b.recorded_s, b.idle_ns, b.kernel_ns) for b in out["buckets"]] == [
        (6, 2, 2.0, 400_000_000, 1_600_000_000), (7, 1, 1.0, 200_000_000, 1_400_000_000),
        (8, 1, 1.0, 200_000_000, 800_000_000)]
    assert [(s.name, s.short_calls) for s in out["short"]] == [(ADD, 36_000)]
    assert {(s.pod, s.kernel) for s in out["stacks"]} == {
        (p, k) for p in ("trainer-0", "trainer-1", "serve-0") for k in (GEMM, ATTENTION, ADD)}


def test_plain_round_trip_redelivery_scope_and_retention(pg_db: str) -> None:
    async def body(store: Store) -> dict[str, Any]:
        windows = _windows(T0)
        out: dict[str, Any] = {"first": await K.save(store.pool, windows),
                               "again": await K.KernelStore(store.pool).save(windows[:2])}
        out["rows"] = (await store.pool.fetchval("SELECT count(*) FROM kernel_windows"),
                       await store.pool.fetchval("SELECT count(*) FROM kernel_stats"))
        out["row"] = dict(await store.pool.fetchrow(
            "SELECT s.tableoid::regclass::text AS part, w.gpu, w.namespace, w.container, w.command, w.copies, "
            "s.grid, s.block FROM kernel_stats s JOIN kernel_windows w USING (ts, node, pid) "
            "WHERE pid = 4242 AND kernel = $1 ORDER BY ts LIMIT 1", GEMM))
        out["reads"] = await _reads(store, T0)
        out["research"] = await _reads(store, T0, ["research"])
        out["nobody"] = await K.totals(store.pool, K.Selection("llm", T0, T0 + timedelta(minutes=1), scope=[]))
        out["prod_only"] = await K.totals(store.pool, K.Selection("llm", T0, T0 + timedelta(minutes=1), "prod"))
        await store.maintain(T0 + timedelta(days=14, hours=1))  # T0's day ends 14 d 16 h before: kept
        out["day14"] = await store.pool.fetchval("SELECT count(*) FROM kernel_stats")
        await store.maintain(T0 + timedelta(days=20))
        out["day20"] = (await store.pool.fetchval("SELECT count(*) FROM kernel_windows"),
                        await store.pool.fetchval("SELECT count(*) FROM kernel_stats"))
        return out

    out = with_store(pg_db, body)
    assert out["first"] == 4 and out["again"] == 0
    assert out["rows"] == (4, 12)
    row = out["row"]
    assert row["part"] == f"kernel_stats_p{T0:%Y%m%d}"  # a day partition, made at open
    assert (row["gpu"], row["namespace"], row["container"], row["command"]) == ("GPU-k1", "research", "main",
                                                                                "python train.py")
    assert json.loads(row["copies"])[0] == {"kind": "HtoD", "memory": "pageable", "calls": 100, "bytes": 200 << 20,
                                            "total_ns": 40_000_000}
    assert (row["grid"], row["block"]) == ([132, 1, 1], [384, 1, 1])
    _check_reads(out["reads"], T0)
    research = out["research"]
    assert (research["totals"].windows, research["totals"].nodes) == (3, 1)  # prod's window is not even counted
    assert research["top"].all_ns == 3_000_000_000
    assert {s.pod for s in research["stacks"]} == {"trainer-0", "trainer-1"}
    assert out["nobody"].windows == 0 and out["nobody"].first is None
    assert out["prod_only"].windows == 1
    assert out["day14"] == 12
    assert out["day20"] == (0, 0)


def test_what_postgresql_cannot_store_is_refused_naming_the_field(pg_db: str) -> None:
    bad_name = replace(training(T0.timestamp()), kernels=(KernelStat("k\ud800", 1, 10, 10),))
    bad_pod = training(T0.timestamp()).with_identity(pod="p\udc00")
    twice = replace(training(T0.timestamp() + 30),
                    kernels=(KernelStat("k", 2, 10, 5), KernelStat("k", 3, 20, 9, short_calls=3)))

    async def body(store: Store) -> list[Any]:
        out: list[Any] = []
        for w in (bad_name, bad_pod):
            with pytest.raises(ValueError) as err:
                await K.save(store.pool, [w])
            out.append(str(err.value))
        out.append(await K.save(store.pool, [twice]))  # a repeated name: summed into one row
        out.append(tuple(await store.pool.fetchrow("SELECT calls, total_ns, p95_ns, short_calls FROM kernel_stats")))
        return out

    out = with_store(pg_db, body)
    assert "'kernels[0].name'" in out[0] and "lone surrogate" in out[0]
    assert "'pod'" in out[1]
    assert out[2:] == [1, (5, 30, 9, 3)]
    assert issubclass(StoreRefused, ValueError)


def test_timescale_hypertables_policies_compression_and_redelivery(pglite_dsn: str) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    t0 = now - timedelta(days=3)  # past compress_after, within retention
    old = now - timedelta(days=20)  # past retention

    async def run_jobs(store: Store, proc: str) -> None:
        for row in await store.pool.fetch("SELECT job_id FROM timescaledb_information.jobs WHERE proc_name = $1 "
                                          "AND hypertable_name IN ('kernel_windows', 'kernel_stats')", proc):
            await store.pool.execute(f"CALL run_job({int(row['job_id'])})")

    async def body(store: Store) -> dict[str, Any]:
        assert store.profile == "timescale"
        fetch = store.pool.fetch
        out: dict[str, Any] = {
            "hypertables": {r["hypertable_name"]: r["compression_enabled"] for r in await fetch(
                "SELECT hypertable_name, compression_enabled FROM timescaledb_information.hypertables "
                "WHERE hypertable_name LIKE 'kernel_%'")},
            "settings": {(r["hypertable_name"], r["attname"], r["segmentby_column_index"] is not None) for r in
                         await fetch("SELECT hypertable_name, attname, segmentby_column_index FROM "
                                     "timescaledb_information.compression_settings WHERE hypertable_name LIKE "
                                     "'kernel_%'")},
            "jobs": {(r["proc_name"], r["hypertable_name"]): json.loads(r["config"]) for r in await fetch(
                "SELECT proc_name, hypertable_name, config FROM timescaledb_information.jobs "
                "WHERE hypertable_name LIKE 'kernel_%'")},
        }
        windows = _windows(t0)
        out["first"] = [await K.save(store.pool, [w]) for w in windows]  # PGlite: small messages
        out["old"] = await K.save(store.pool, [training(old.timestamp(), pid=99)])
        await run_jobs(store, "policy_compression")
        out["compressed"] = await store.pool.fetchval(
            "SELECT bool_and(is_compressed) FROM timescaledb_information.chunks "
            "WHERE hypertable_name LIKE 'kernel_%' AND range_end > $1 AND range_end < $2", old + timedelta(days=1),
            now - timedelta(days=1))
        out["again"] = [await K.save(store.pool, [w]) for w in windows[:2]]  # against compressed chunks
        out["reads"] = await _reads(store, t0)
        await run_jobs(store, "policy_retention")
        out["kept"] = await store.pool.fetchval("SELECT count(*) FROM kernel_windows")
        return out

    out = with_ts_store(pglite_dsn, body)
    assert out["hypertables"] == {"kernel_windows": True, "kernel_stats": True}
    assert {("kernel_windows", "service", True), ("kernel_stats", "service", True),
            ("kernel_stats", "kernel", True), ("kernel_stats", "pid", False)} <= out["settings"]
    for table in ("kernel_windows", "kernel_stats"):
        assert out["jobs"][("policy_compression", table)]["compress_after"] == "1 day"
        assert out["jobs"][("policy_retention", table)]["drop_after"] == "14 days"
    assert out["first"] == [1, 1, 1, 1] and out["old"] == 1
    assert out["compressed"] is True
    assert out["again"] == [0, 0]
    _check_reads(out["reads"], t0)
    assert out["kept"] == 4


def test_a_process_outside_any_pod_is_read_back_as_unattributed_by_unscoped_callers_only(pg_db: str) -> None:
    """A workstation under ``gpuwatch up`` (or a bare-metal node) has no pods: its windows come
    with no namespace and no service, and must still be readable, but by unscoped tokens alone."""
    bare = training(T0.timestamp(), namespace="", pod="", service="")

    async def body(store: Store) -> tuple[int, int, int]:
        await K.save(store.pool, [bare])
        span = (T0 - timedelta(minutes=1), T0 + timedelta(minutes=1))
        return ((await K.totals(store.pool, K.Selection(UNATTRIBUTED, *span))).windows,
                (await K.totals(store.pool, K.Selection(UNATTRIBUTED, *span, scope=["research"]))).windows,
                (await K.totals(store.pool, K.Selection("llm", *span))).windows)

    assert with_store(pg_db, body) == (1, 0, 0)
