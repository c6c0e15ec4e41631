"""The collector's ``/metrics``: open without ``metrics_auth``; with it, a Bearer token of any
role, and a namespace-scoped token sees only its namespaces' series; ``metrics_per_service``
off drops the per-service series."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
from fastapi.testclient import TestClient

from collector.api import create_app
from collector.api.settings import ApiSettings
from tests.api.conftest import Fleet


@contextmanager
def _client(fleet: Fleet, **settings: Any) -> Iterator[TestClient]:
    app = create_app(None, ApiSettings.model_validate({"token_cache_seconds": 0, "stale_after_seconds": 3600,
                                                       **settings}))
    with TestClient(app) as client:
        pool = client.portal.call(lambda: asyncpg.create_pool(fleet.dsn, min_size=1, max_size=2))
        app.state.ctx.pool = pool
        try:
            yield client
        finally:
            client.portal.call(pool.close)


def _get(client: TestClient, fleet: Fleet, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {fleet.tokens[token]}"} if token else {}
    return client.get("/metrics", headers=headers)


def test_metrics_open_by_default(fleet_db: Fleet) -> None:
    with _client(fleet_db) as client:
        text = _get(client, fleet_db, None).text
    assert 'gpuwatch_service_gpus{namespace="prod",service="chat"} 1.0' in text
    assert 'gpuwatch_service_memory_used_mib{namespace="prod",service="chat"} 25000.0' in text  # both processes
    assert "gpuwatch_collector_db_up 1.0" in text


def test_metrics_auth_and_scopes(fleet_db: Fleet) -> None:
    with _client(fleet_db, metrics_auth=True) as client:
        refused = _get(client, fleet_db, None)
        assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
        assert _get(client, fleet_db, "research").status_code == 200
        shown = client.get("/api/v1/settings", headers={"Authorization": f"Bearer {fleet_db.tokens['admin']}"})
        assert shown.json()["metrics_auth"] is True and shown.json()["metrics_per_service"] is True
        everything = _get(client, fleet_db, "viewer").text
        research = _get(client, fleet_db, "research").text
        nobody = _get(client, fleet_db, "nobody").text
    assert 'service="chat"' in everything and 'service="llm"' in everything
    assert 'gpuwatch_collector_open_anomalies{severity="warning"} 3.0' in everything
    # a research token: its own service and anomalies, nothing of prod, no fleet-wide figures
    assert 'gpuwatch_service_gpus{namespace="research",service="llm"} 1.0' in research
    assert 'gpuwatch_collector_open_anomalies{severity="warning"} 1.0' in research
    for leak in ("prod", "chat", "etl", "gpuwatch_collector_records", "gpuwatch_collector_consumer_lag"):
        assert leak not in research, leak
    assert "gpuwatch_service_gpus{" not in nobody and "open_anomalies{" not in nobody


def test_metrics_without_per_service_series(fleet_db: Fleet) -> None:
    with _client(fleet_db, metrics_per_service=False) as client:
        text = _get(client, fleet_db, None).text
    assert "gpuwatch_service_" not in text and "gpuwatch_collector_open_anomalies" in text


def test_settings_come_from_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv("GPUWATCH_API_METRICS_AUTH", "true")
    monkeypatch.setenv("GPUWATCH_API_METRICS_PER_SERVICE", "false")
    s = ApiSettings.model_validate({})
    assert s.metrics_auth is True and s.metrics_per_service is False
    monkeypatch.delenv("GPUWATCH_API_METRICS_AUTH")
    monkeypatch.delenv("GPUWATCH_API_METRICS_PER_SERVICE")
    s = ApiSettings.model_validate({})
    assert s.metrics_auth is False and s.metrics_per_service is True
