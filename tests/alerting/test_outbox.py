"""The detection service on a real PostgreSQL: anomalies and alerts stored, notifications
sent exactly once across a restart and across two dispatchers, silences honoured, failures
deferred or given up as the policy says."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from collector.alerting.delivery import RetryPolicy
from collector.alerting.rules import RuleSet, parse_rules
from collector.alerting.service import DetectionService
from collector.store.migrate import migrate
from tests.alerting.conftest import Receiver
from tests.detect.helpers import record, trace

FAST = RetryPolicy(attempts=2, base_s=0.01, cap_s=0.02)


def rules(receiver: Receiver) -> RuleSet:
    rs = parse_rules(f"""\
channels:
  hook: {{type: alertmanager, url: "{receiver.url('')}"}}
rules:
  - name: hot
    kinds: [thermal_throttle]
    for: 10s
    group_by: [node]
    channels: [hook]
""", "r.yaml")
    assert rs.errors == []
    return rs


def hot_records() -> list[Any]:
    def make(t: float, g: int):  # type: ignore[no-untyped-def]
        hot = g == 1 and 300 <= t < 400
        return record(t, g, temp=92 if hot else 70, reasons=0x40 if hot else 0x4, clock=1000 if hot else 1485)
    return list(trace(500, 2, make))


async def _pool(dsn: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, "plain")
    finally:
        await conn.close()
    return await asyncpg.create_pool(dsn, min_size=1, max_size=4)


def test_stored_then_sent_exactly_once_after_a_restart(pg_db: str, receiver: Receiver, tmp_path: Path) -> None:
    async def go() -> None:
        pool = await _pool(pg_db)
        svc = DetectionService(pool, rules(receiver), policy=FAST)
        records = hot_records()
        for i in range(0, 700, 50):  # up to t=350: the anomaly is open and the alert fired
            svc.on_committed(records[i:i + 50])
            await svc.flush()
        await pool.close()  # the collector dies before sending anything

        pool = await _pool(pg_db)
        anomalies = await pool.fetch("SELECT kind, gpu, end_ts, causes FROM anomalies")
        assert [(r["kind"], r["gpu"], r["end_ts"]) for r in anomalies] == [("thermal_throttle", "GPU-n0-1", None)]
        assert "clock event reason HW_THERMAL" in json.loads(anomalies[0]["causes"])
        alert = await pool.fetchrow("SELECT rule, status, node, gpu, anomaly_id, labels FROM alerts")
        assert (alert["rule"], alert["status"], alert["gpu"]) == ("hot", "firing", "GPU-n0-1")
        assert alert["anomaly_id"] is not None and json.loads(alert["labels"])["alertname"] == "hot"
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox WHERE status = 'pending'") == 1

        svc2 = DetectionService(pool, rules(receiver), policy=FAST)  # after the restart
        other = DetectionService(pool, rules(receiver), policy=FAST)  # and a second replica
        await asyncio.gather(svc2.dispatch(), other.dispatch(), svc2.dispatch())
        assert len(receiver.bodies("/api/v2/alerts")) == 1
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox WHERE status = 'sent'") == 1

        svc2.engine = svc.engine  # the same stream continues: the throttle ends
        svc2.router = svc.router
        svc2.on_committed(records[700:])
        await svc2.flush()
        await svc2.dispatch()
        sent = receiver.bodies("/api/v2/alerts")
        assert len(sent) == 2 and sent[1][0]["labels"]["gpu"] == "GPU-n0-1"
        assert await pool.fetchval("SELECT status FROM alerts") == "resolved"
        assert await pool.fetchval("SELECT end_ts IS NOT NULL FROM anomalies") is True
        await svc2.flush()  # the same batch processed again enqueues nothing new
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 2
        await pool.close()

    asyncio.run(go())


def test_silenced_alerts_are_stored_but_not_sent(pg_db: str, receiver: Receiver) -> None:
    async def go() -> None:
        pool = await _pool(pg_db)
        now = datetime.now(UTC)
        await pool.execute("INSERT INTO silences (matchers, ends_at, created_by) VALUES ($1::jsonb, $2, 'op')",
                           json.dumps({"gpu": "GPU-n0-1"}), now + timedelta(hours=1))
        svc = DetectionService(pool, rules(receiver), policy=FAST)
        svc.on_committed(hot_records()[:700])
        await svc.flush()
        await svc.dispatch()
        assert await pool.fetchval("SELECT silenced FROM alerts") is True
        assert await pool.fetchval("SELECT count(*) FROM alert_outbox") == 0
        assert receiver.bodies("/api/v2/alerts") == []
        await pool.close()

    asyncio.run(go())


def test_transient_failures_are_deferred_and_4xx_fails_for_good(pg_db: str, receiver: Receiver) -> None:
    async def go() -> None:
        pool = await _pool(pg_db)
        svc = DetectionService(pool, rules(receiver), policy=FAST)
        svc.on_committed(hot_records()[:700])
        await svc.flush()
        receiver.script = [(503, {}), (503, {})]
        stats = await svc.dispatch()
        assert (stats.sent, stats.deferred) == (0, 1)
        row = await pool.fetchrow("SELECT status, attempts, last_error, next_attempt_at > now() AS later "
                                  "FROM alert_outbox")
        assert (row["status"], row["attempts"], row["later"]) == ("pending", 2, True)
        assert row["last_error"] == "channel hook: HTTP 503"
        await pool.execute("UPDATE alert_outbox SET next_attempt_at = now()")
        receiver.script = [(400, {})]
        stats = await svc.dispatch()
        assert stats.failed == 1
        assert await pool.fetchval("SELECT status FROM alert_outbox") == "failed"
        await pool.close()

    asyncio.run(go())
