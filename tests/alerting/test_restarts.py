"""Alerting across a restart and a handover on a real PostgreSQL (issue 16, item 2): an anomaly
open when the collector died keeps its start, is not opened again, and is notified once, and
its resolution once; a group whose alerts all resolved notifies its next alert."""

from __future__ import annotations

import asyncio
from typing import Any

from collector.alerting.service import DetectionService
from tests.alerting.conftest import Receiver
from tests.alerting.test_outbox import FAST, _pool, rules
from tests.detect.helpers import record, trace


def _hot(spans: tuple[tuple[int, int], ...], seconds: int) -> list[Any]:
    def make(t: float, g: int):  # type: ignore[no-untyped-def]
        hot = g == 1 and any(a <= t < b for a, b in spans)
        return record(t, g, temp=92 if hot else 70, reasons=0x40 if hot else 0x4, clock=1000 if hot else 1485)
    return list(trace(seconds, 2, make))


async def _judge(svc: DetectionService, records: list[Any], step: int = 50) -> None:
    """What the ingestor does per stored batch: take saved state over, judge, then the flush."""
    for i in range(0, len(records), step):
        batch = records[i:i + step]
        await svc.prepare(batch)
        svc.on_committed(batch)
        await svc.flush()


async def _anomalies(pool: Any) -> list[tuple[str, Any, Any]]:
    return [(r["kind"], r["start_ts"], r["end_ts"])
            for r in await pool.fetch("SELECT kind, start_ts, end_ts FROM anomalies ORDER BY start_ts")]


def test_a_groups_next_alert_after_its_last_resolved_is_notified(pg_db: str, receiver: Receiver) -> None:
    """The notification's key named its group and a number that started over with the group, so the
    second incident's firing notification was taken for the first's and never sent."""
    async def go() -> None:
        pool = await _pool(pg_db)
        svc = DetectionService(pool, rules(receiver), policy=FAST)
        await _judge(svc, _hot(((300, 400), (1000, 1100)), 1400))
        assert len(await _anomalies(pool)) == 2
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 4  # firing, resolved, twice
        await pool.close()
    asyncio.run(go())


def test_an_anomaly_open_at_a_crash_keeps_its_start_and_is_notified_once(pg_db: str, receiver: Receiver) -> None:
    async def go() -> None:
        pool = await _pool(pg_db)
        records = _hot(((300, 400),), 600)
        before = DetectionService(pool, rules(receiver), policy=FAST)
        await _judge(before, records[:700])  # to t=350: open, fired, notified; then the process dies
        assert [a[2] for a in await _anomalies(pool)] == [None]
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 1

        after = DetectionService(pool, rules(receiver), policy=FAST)  # the restart: it re-reads from t=300
        await _judge(after, records[600:])
        anomalies = await _anomalies(pool)
        assert len(anomalies) == 1 and anomalies[0][2] is not None  # the same one, closed
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 2  # and its resolution, once
        assert after.counters["states_restored"] == 1 and after.counters["anomalies_restored"] == 1
        await pool.close()
    asyncio.run(go())


def test_a_node_handed_to_another_replica_is_resolved_there_once(pg_db: str, receiver: Receiver) -> None:
    async def go() -> None:
        pool = await _pool(pg_db)
        records = _hot(((300, 400),), 1200)
        old = DetectionService(pool, rules(receiver), policy=FAST)
        await _judge(old, records[:700])
        await old.release({"n0"})  # its partition is revoked
        old.forget({"n0"})  # and went to another replica
        new = DetectionService(pool, rules(receiver), policy=FAST)
        await _judge(new, records[700:])
        await old.flush()
        assert old.router.groups == {} and old.engine.gpus == {}  # nothing left to repeat or resolve there
        anomalies = await _anomalies(pool)
        assert len(anomalies) == 1 and anomalies[0][2] is not None
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 2
        await pool.close()
    asyncio.run(go())
