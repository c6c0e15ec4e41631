"""The fleet endpoints against a real PostgreSQL: inventory, nodes, services, series, history."""

from __future__ import annotations

from datetime import timedelta

from tests.api.conftest import A1, A3, B1, B2, Api


def test_gpus_lists_inventory_holders_and_health(api: Api) -> None:
    resp = api.get("/gpus")
    assert resp.status_code == 200, resp.text
    items = {g["gpu"]: g for g in resp.json()["items"]}
    assert set(items) == {A1, A3, B1, B2}
    a3 = items[A3]
    assert a3["node"] == "node-a" and a3["model"] == "NVIDIA H200" and a3["health"] == "ok"
    assert a3["holders"][0]["pod"] == "trainer-1" and a3["holders"][0]["namespace"] == "research"
    assert abs(a3["metrics"]["DCGM_FI_PROF_SM_ACTIVE"] - 0.85) < 1e-9
    assert a3["open_anomalies"] == 1
    assert items[A1]["holders"][0]["pod"] == "batch-0"  # the newest holder
    assert items[B2]["holders"] == []


def test_nodes_and_node_detail(api: Api) -> None:
    nodes = {n["node"]: n for n in api.get("/nodes").json()["items"]}
    assert nodes["node-a"]["gpu_count"] == 2 and nodes["node-b"]["gpu_count"] == 2
    assert nodes["node-b"]["open_anomalies"] == 2
    detail = api.get("/nodes/node-b").json()
    assert {g["gpu"] for g in detail["gpus"]} == {B1, B2}
    missing = api.get("/nodes/node-z")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_services_hold_gpus_now(api: Api) -> None:
    items = {(s["namespace"], s["service"]): s for s in api.get("/services").json()["items"]}
    assert set(items) == {("research", "llm"), ("prod", "etl"), ("prod", "chat")}
    assert items[("research", "llm")]["pods"] == ["trainer-1"]
    assert [g["gpu"] for g in items[("prod", "chat")]["gpus"]] == [B1]


def test_series_picks_the_source_from_the_step(api: Api) -> None:
    f = api.fleet
    start, end = f.start.timestamp(), f.end.timestamp()
    raw = api.get(f"/gpus/{A3}/series", metrics="DCGM_FI_PROF_SM_ACTIVE", start=start, end=end, step="10s").json()
    assert raw["source"] == "raw" and len(raw["times"]) == 180
    assert all(abs(v - 0.85) < 1e-9 for v in raw["series"]["DCGM_FI_PROF_SM_ACTIVE"])
    minute = api.get(f"/gpus/{A3}/series", metrics="DCGM_FI_PROF_SM_ACTIVE,DCGM_FI_DEV_POWER_USAGE",
                     start=f.start.isoformat(), end=f.end.isoformat(), step="1m").json()
    assert minute["source"] == "1m" and 30 <= len(minute["times"]) <= 31
    assert abs(minute["series"]["DCGM_FI_DEV_POWER_USAGE"][1] - 525.0) < 1e-6
    hour = api.get(f"/gpus/{A3}/series", start=start - 3600, end=end, step="1h").json()
    assert hour["source"] == "1h" and 1 <= len(hour["times"]) <= 2


def test_series_refuses_too_many_points_and_names_the_field(api: Api) -> None:
    resp = api.get(f"/gpus/{A3}/series", start=0, end=86400, step="1s")
    assert resp.status_code == 400
    body = resp.json()
    assert body["error"] == "too_many_points" and body["limit"] == 5000 and "5000" in body["message"]
    assert body["field"] == "step"


def test_bad_parameters_answer_4xx_naming_the_field(api: Api) -> None:
    for params, field in (({"start": "yesterday"}, "start"), ({"step": "fast"}, "step"),
                          ({"metrics": "NOPE"}, "metrics"), ({"start": "2026-01-01T00:00:00"}, "start")):
        resp = api.get(f"/gpus/{A3}/series", **params)
        assert resp.status_code == 400, (params, resp.text)
        assert resp.json()["field"] == field
    resp = api.get("/events", limit="many")
    assert resp.status_code == 422 and resp.json()["field"] == "limit"
    assert api.get("/gpus/GPU-nope/series").status_code == 404


def test_service_history_from_rollups(api: Api) -> None:
    f = api.fleet
    resp = api.get("/services/llm/history", start=f.start.timestamp(), end=f.end.timestamp() + 60, step="5m")
    assert resp.status_code == 200, resp.text
    h = resp.json()
    assert h["price_per_gpu_hour"] == 2.5 and h["steps"]
    pods = {p["pod"]: p for p in h["pods"]}
    assert set(pods) == {"trainer-0", "trainer-1"}
    # trainer-1 held A3 for the whole 30 minutes; trainer-0 held A1 for the first 15
    assert abs(pods["trainer-1"]["gpu_seconds"] - 1800) < 61
    assert abs(pods["trainer-0"]["gpu_seconds"] - 900) < 61
    assert abs(pods["trainer-1"]["sm_active"] - 0.85) < 1e-6
    assert abs(pods["trainer-1"]["memory_used_mib"] - 42_000) < 1e-6
    total = h["total"]
    assert abs(total["gpu_seconds"] - sum(s["gpu_seconds"] for s in h["steps"])) < 1e-6
    assert abs(total["cost"] - total["gpu_seconds"] / 3600 * 2.5) < 1e-9
    # energy: 525 W on A3 for 1800 s plus 550 W on A1 for 900 s, to a minute at each edge
    assert abs(total["energy_kwh"] - (525 * 1800 + 550 * 900) / 3.6e6) < 0.02
    assert api.get("/services/llm/history", step="30s").json()["field"] == "step"


def test_history_point_limit(api: Api) -> None:
    resp = api.get("/services/llm/history", start=0, end=timedelta(days=30).total_seconds(), step="1m")
    assert resp.status_code == 400 and resp.json()["error"] == "too_many_points"


def test_nul_characters_are_a_bad_request(api: Api) -> None:
    # found by Schemathesis: PostgreSQL text cannot hold NUL, which used to answer 500
    resp = api.get("/anomalies", namespace="\x00")
    assert resp.status_code == 400 and resp.json()["field"] == "namespace"
    resp = api.call("POST", "/silences", json={"matchers": {"namespace": "a\x00"}, "duration_seconds": 60})
    assert resp.status_code == 400


def test_history_pod_totals_from_hours_and_minutes_agree_with_the_steps(api: Api) -> None:
    # pods come from pod hours plus ragged minute edges, steps from service minutes
    f = api.fleet
    for start, end, step in ((f.start.timestamp() - 3 * 3600 + 420, f.end.timestamp() + 7200 - 300, "1m"),
                             (f.start.timestamp() - 3600, f.end.timestamp() + 3600, "1h"),
                             (f.start.timestamp() + 600, f.end.timestamp() - 600, "5m")):
        h = api.get("/services/llm/history", start=start, end=end, step=step).json()
        pods = sum(p["gpu_seconds"] for p in h["pods"])
        steps = sum(s["gpu_seconds"] for s in h["steps"])
        assert h["total"]["gpu_seconds"] > 0
        assert abs(pods - h["total"]["gpu_seconds"]) < 1e-6 and abs(steps - pods) < 1e-6, (step, h["pods"])
        energy = sum(p["energy_kwh"] for p in h["pods"])
        assert abs(energy - h["total"]["energy_kwh"]) < 1e-9


def test_series_json_matches_the_store_query(api: Api) -> None:
    import asyncio
    from datetime import timedelta

    import asyncpg

    from collector.store import queries

    f = api.fleet
    keys = ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_TEMP"]

    async def expected(step: timedelta) -> queries.Series:
        conn = await asyncpg.connect(f.dsn)
        try:
            return await queries.gpu_series(conn, A1, keys, f.start, f.end, step)
        finally:
            await conn.close()

    for step, text in ((timedelta(seconds=30), "30s"), (timedelta(minutes=2), "2m"), (timedelta(hours=1), "1h")):
        want = asyncio.run(expected(step))
        got = api.get(f"/gpus/{A1}/series", metrics=",".join(keys), start=f.start.isoformat(),
                      end=f.end.isoformat(), step=text).json()
        assert got["source"] == want.source
        assert got["times"] == [t.timestamp() for t in want.times]
        for k in keys:
            assert got["series"][k] == [None if v is None else float(v) for v in want.values[k]]
