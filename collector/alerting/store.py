"""Anomalies and alert states as the alerting tables hold them (the SQL is in the store).

Why upserts keyed by the tables' unique keys: the detection service may process a batch
again after a failure or a restart; ``anomalies (fingerprint, start_ts)`` and ``alerts
(rule, fingerprint, starts_at)`` make the second write an update of the first
(``collector/store/alert_tables.py`` writes them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from collector.alerting.router import Alert
from collector.detect.anomaly import Anomaly, AnomalyKey
from collector.store import alert_tables as tables


def ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


async def upsert_anomalies(conn: Any, anomalies: Sequence[Anomaly]) -> dict[AnomalyKey, int]:
    """Insert or update; returns ``anomaly.key -> row id``."""
    ids: dict[AnomalyKey, int] = {}
    for a in anomalies:
        ids[a.key] = await tables.upsert_anomaly(conn, tables.AnomalyWrite(
            a.fingerprint, a.kind, a.severity, a.gpu, a.node, a.namespace, a.pod, a.service, a.metric,
            ts(a.start), ts(a.end), a.summary, json.dumps(a.causes)))
    return ids


async def upsert_alerts(conn: Any, alerts: Sequence[Alert], anomaly_ids: dict[AnomalyKey, int]) -> None:
    for a in alerts:
        if a.status == "pending":
            continue
        await tables.upsert_alert(conn, tables.AlertWrite(
            a.rule, a.fingerprint, a.status, a.severity, a.anomaly.namespace, a.anomaly.service, a.anomaly.gpu,
            a.anomaly.node, a.anomaly.summary, json.dumps(a.labels), ts(a.starts_at), ts(a.ends_at),
            anomaly_ids.get(a.anomaly.key), a.silenced_by is not None))
