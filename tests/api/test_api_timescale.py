"""The API's queries on the TimescaleDB profile (PGlite + TimescaleDB, see
tests/test_store_timescale.py): rollups there are real-time continuous aggregates, and
the service usage tables are filled from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from fastapi.testclient import TestClient

from collector.api import create_app, tokens
from collector.api.settings import ApiSettings
from collector.store import Store, usage
from collector.store import kernels as kernel_store
from tests.api.conftest import A1, A3, B1, SPAN, fleet_records, kernel_windows
from tests.test_store_timescale import PGLITE_POOL, pglite_dsn

__all__ = ["pglite_dsn"]  # the module-scoped PGlite server fixture


@pytest.fixture(scope="module")
def ts_api(pglite_dsn: str) -> Iterator[tuple[TestClient, dict[str, str], datetime]]:
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)

    async def populate() -> dict[str, str]:
        store = await Store.open(pglite_dsn, **PGLITE_POOL)
        try:
            assert store.profile == "timescale"
            records = fleet_records(end)
            for i in range(0, len(records), 40):  # PGlite refuses messages over ~64 KB
                await store.write(records[i:i + 40])
            for window in kernel_windows(end):  # one per statement, for the same reason
                await kernel_store.save(store.pool, [window])
            async with store.pool.acquire() as conn:
                await usage.rebuild(conn, end - SPAN - timedelta(minutes=2), end + timedelta(minutes=2))
                admin, _ = await tokens.create(conn, "admin", None)
                research, _ = await tokens.create(conn, "viewer", ["research"])
            return {"admin": admin, "research": research}
        finally:
            await store.close(timeout=5)

    made = asyncio.run(populate())
    app = create_app(None, ApiSettings.model_validate({"token_cache_seconds": 0}))
    with TestClient(app) as client:
        pool = client.portal.call(lambda: asyncpg.create_pool(pglite_dsn, **PGLITE_POOL))
        app.state.ctx.pool = pool
        try:
            yield client, made, end
        finally:
            client.portal.call(pool.terminate)


def test_fleet_series_and_history_on_timescale(ts_api: tuple[TestClient, dict[str, str], datetime]) -> None:
    client, made, end = ts_api
    admin = {"Authorization": f"Bearer {made['admin']}"}
    research = {"Authorization": f"Bearer {made['research']}"}
    gpus = client.get("/api/v1/gpus", headers=admin).json()["items"]
    assert {g["gpu"] for g in gpus} >= {A1, A3, B1}
    assert [g["gpu"] for g in client.get("/api/v1/gpus", headers=research).json()["items"]] == [A3]
    start = (end - SPAN).timestamp()
    for step, source in (("10s", "raw"), ("1m", "1m"), ("1h", "1h")):
        s = client.get(f"/api/v1/gpus/{A3}/series", headers=admin,
                       params={"start": start - 3600, "end": end.timestamp(), "step": step}).json()
        assert s["source"] == source and s["times"], s
    scoped = client.get(f"/api/v1/gpus/{A1}/series", headers=research,
                        params={"start": start, "end": end.timestamp(), "step": "1m",
                                "metrics": "DCGM_FI_PROF_SM_ACTIVE"}).json()
    assert 15 <= len([v for v in scoped["series"]["DCGM_FI_PROF_SM_ACTIVE"] if v is not None]) <= 16
    h = client.get("/api/v1/services/llm/history", headers=admin,
                   params={"start": start, "end": end.timestamp() + 60, "step": "5m"}).json()
    assert {p["pod"] for p in h["pods"]} == {"trainer-0", "trainer-1"}
    assert abs(h["total"]["gpu_seconds"] - 2700) < 1e-6  # 1,800 s on A3, 900 s on A1
    assert abs(h["pods"][1]["memory_used_mib_while_running"] - 42_000) < 1e-6
    assert client.get("/api/v1/services/chat/history", headers=research).status_code == 404
    assert client.get("/api/v1/anomalies", headers=admin).status_code == 200


def test_service_kernels_on_timescale(ts_api: tuple[TestClient, dict[str, str], datetime]) -> None:
    """The kernel routes read the hypertables (migration 0070) as they read the plain tables."""
    client, made, end = ts_api
    admin = {"Authorization": f"Bearer {made['admin']}"}
    research = {"Authorization": f"Bearer {made['research']}"}
    rng = {"since": (end - SPAN).timestamp(), "until": end.timestamp() + 60}
    body = client.get("/api/v1/services/llm/kernels", headers=admin, params=rng).json()
    assert (body["coverage"]["windows"], body["coverage"]["pods"], body["kernel_names"]) == (10, 3, 3)
    assert {h["kind"] for h in body["hints"]} == {"kernel_fusion", "low_occupancy", "pageable_copies", "sync_heavy"}
    scoped = client.get("/api/v1/services/llm/kernels", headers=research, params=rng).json()
    assert scoped["coverage"]["windows"] == 8
    hidden = client.get("/api/v1/services/chat/kernels", headers=research, params=rng)
    assert hidden.status_code == 404
    frame = client.get("/api/v1/services/llm/kernels/flamegraph", headers=research, params=rng).json()
    labels = next(f["values"] for f in frame["fields"] if f["name"] == "label")
    assert labels[:3] == ["total", "llm", "trainer-0"] and "batch-0" not in labels
