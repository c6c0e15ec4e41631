"""The alerting tables: anomalies and alert states written, the outbox, active silences.

Why in the store: it is the collector's one way into the database (no SQL outside
``collector/store``); ``collector/alerting`` decides what to write and when, these functions
say how, with parameterised statements only. Upserts are keyed by the tables' unique keys
(``anomalies (fingerprint, start_ts)``, ``alerts (rule, fingerprint, starts_at)``,
``alert_outbox (idem_key)``), so a batch processed again after a failure or a restart
updates what it wrote the first time. The outbox is claimed one due row at a time with
``FOR UPDATE SKIP LOCKED`` inside the caller's transaction, so two replicas never send the
same row (collector/alerting/outbox.py says why it is shaped so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from collector.detect.anomaly import Anomaly, AnomalyKey

if TYPE_CHECKING:  # (alerting imports this module: the type only, no import at run time)
    from collector.alerting.router import Alert


async def upsert_anomalies(conn: Any, anomalies: Sequence[Anomaly]) -> dict[AnomalyKey, int]:
    """Insert or update each anomaly; returns ``anomaly.key -> row id``."""
    ids: dict[AnomalyKey, int] = {}
    for a in anomalies:
        row_id = await conn.fetchval(
            "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, namespace, pod, service, metric, "
            "start_ts, end_ts, summary, causes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb) "
            "ON CONFLICT (fingerprint, start_ts) DO UPDATE SET severity = EXCLUDED.severity, end_ts = EXCLUDED.end_ts, "
            "summary = EXCLUDED.summary, causes = EXCLUDED.causes RETURNING id",
            a.fingerprint, a.kind, a.severity, a.gpu, a.node, a.namespace, a.pod, a.service, a.metric,
            _ts(a.start), _ts(a.end), a.summary, json.dumps(a.causes),
        )
        ids[a.key] = int(row_id)
    return ids


def _ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


async def upsert_alerts(conn: Any, alerts: Sequence[Alert], anomaly_ids: dict[AnomalyKey, int]) -> None:
    """Insert or update each alert that is more than pending, linked to its anomaly's row."""
    for a in alerts:
        if a.status == "pending":
            continue
        await conn.execute(
            "INSERT INTO alerts (rule, fingerprint, status, severity, namespace, service, gpu, node, summary, labels, "
            "starts_at, ends_at, anomaly_id, silenced, updated_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14, now()) "
            "ON CONFLICT (rule, fingerprint, starts_at) DO UPDATE SET status = EXCLUDED.status, "
            "severity = EXCLUDED.severity, ends_at = EXCLUDED.ends_at, silenced = EXCLUDED.silenced, "
            "summary = EXCLUDED.summary, labels = EXCLUDED.labels, "
            "anomaly_id = COALESCE(EXCLUDED.anomaly_id, alerts.anomaly_id), updated_at = now()",
            a.rule, a.fingerprint, a.status, a.severity, a.anomaly.namespace, a.anomaly.service, a.anomaly.gpu,
            a.anomaly.node, a.anomaly.summary, json.dumps(a.labels), _ts(a.starts_at), _ts(a.ends_at),
            anomaly_ids.get(a.anomaly.key), a.silenced_by is not None,
        )


async def active_silences(conn: Any, now: datetime) -> list[Any]:
    """Rows (id, matchers, starts_at, ends_at) of the silences not yet ended at ``now``."""
    return list(await conn.fetch("SELECT id, matchers, starts_at, ends_at FROM silences WHERE ends_at > $1", now))


async def enqueue_outbox(conn: Any, idem_keys: Sequence[str], channels: Sequence[str],
                         payloads_json: Sequence[str]) -> int:
    """Insert outbox rows (idempotent by ``idem_key``); how many were new."""
    result = await conn.fetch(
        "INSERT INTO alert_outbox (idem_key, channel, payload) "
        "SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[]) "
        "ON CONFLICT (idem_key) DO NOTHING RETURNING id",
        list(idem_keys), list(channels), list(payloads_json),
    )
    return len(result)


async def claim_due(conn: Any) -> Any:
    """The oldest due pending row (id, channel, payload, attempts), locked for this transaction; None."""
    return await conn.fetchrow(
        "SELECT id, channel, payload, attempts FROM alert_outbox "
        "WHERE status = 'pending' AND next_attempt_at <= now() "
        "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")


async def mark_sent(conn: Any, row_id: int, attempts: int) -> None:
    await conn.execute(
        "UPDATE alert_outbox SET status = 'sent', sent_at = now(), attempts = $2, last_error = NULL "
        "WHERE id = $1", row_id, attempts)


async def mark_failed(conn: Any, row_id: int, error: str | None, attempts: int | None = None) -> None:
    """Failed for good (``attempts`` None: left as it was)."""
    if attempts is None:
        await conn.execute("UPDATE alert_outbox SET status = 'failed', last_error = $2 WHERE id = $1", row_id, error)
    else:
        await conn.execute(
            "UPDATE alert_outbox SET status = 'failed', attempts = $2, last_error = $3 WHERE id = $1",
            row_id, attempts, error)


async def defer(conn: Any, row_id: int, attempts: int, error: str | None, delay_s: float) -> None:
    await conn.execute(
        "UPDATE alert_outbox SET attempts = $2, last_error = $3, "
        "next_attempt_at = now() + make_interval(secs => $4) WHERE id = $1",
        row_id, attempts, error, delay_s)
