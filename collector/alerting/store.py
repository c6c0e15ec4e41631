"""Writing anomalies and alert states to PostgreSQL (parameterised statements only).

Why upserts keyed by the tables' unique keys: the detection service may process a batch
again after a failure or a restart; ``anomalies (fingerprint, start_ts)`` and ``alerts
(rule, fingerprint, starts_at)`` make the second write an update of the first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from collector.alerting.router import Alert
from collector.detect.anomaly import Anomaly, AnomalyKey


def ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


async def upsert_anomalies(conn: Any, anomalies: Sequence[Anomaly]) -> dict[AnomalyKey, int]:
    """Insert or update; returns ``anomaly.key -> row id``."""
    ids: dict[AnomalyKey, int] = {}
    for a in anomalies:
        row_id = await conn.fetchval(
            "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, namespace, pod, service, metric, "
            "start_ts, end_ts, summary, causes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb) "
            "ON CONFLICT (fingerprint, start_ts) DO UPDATE SET severity = EXCLUDED.severity, end_ts = EXCLUDED.end_ts, "
            "summary = EXCLUDED.summary, causes = EXCLUDED.causes RETURNING id",
            a.fingerprint, a.kind, a.severity, a.gpu, a.node, a.namespace, a.pod, a.service, a.metric,
            ts(a.start), ts(a.end), a.summary, json.dumps(a.causes),
        )
        ids[a.key] = int(row_id)
    return ids


async def upsert_alerts(conn: Any, alerts: Sequence[Alert], anomaly_ids: dict[AnomalyKey, int]) -> None:
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
            a.anomaly.node, a.anomaly.summary, json.dumps(a.labels), ts(a.starts_at), ts(a.ends_at),
            anomaly_ids.get(a.anomaly.key), a.silenced_by is not None,
        )
