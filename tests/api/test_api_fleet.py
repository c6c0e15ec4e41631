"""The fleet endpoints against a real PostgreSQL: inventory, nodes, services, series, history."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

import asyncpg

from tests.api.conftest import A1, A3, B1, B2, Api

RPS = "gpuwatch_inference_requests_per_second"


def test_gpus_lists_inventory_pods_and_health(api: Api) -> None:
    resp = api.get("/gpus")
    assert resp.status_code == 200, resp.text
    items = {g["gpu"]: g for g in resp.json()["items"]}
    assert set(items) == {A1, A3, B1, B2}
    a3 = items[A3]
    assert a3["node"] == "node-a" and a3["model"] == "NVIDIA H200" and a3["gpu_index"] == 1
    assert items[A1]["gpu_index"] == 0 and items[B1]["gpu_index"] == 0
    assert a3["holders"][0]["pod"] == "trainer-1" and a3["holders"][0]["namespace"] == "research"
    assert abs(a3["metrics"]["DCGM_FI_PROF_SM_ACTIVE"] - 0.85) < 1e-9
    # health follows the open anomalies: A3 has a warning one, A1 none
    assert a3["open_anomalies"] == 1 and a3["open_anomalies_by_severity"] == {"warning": 1}
    assert a3["health"] == "degraded" and a3["reasons"][0].startswith("warning thermal_throttle: ")
    assert items[A1]["health"] == "ok" and items[A1]["reasons"] == []
    assert 0 <= a3["sample_age_seconds"] < 3600
    assert items[A1]["holders"][0]["pod"] == "batch-0"  # the newest holder
    assert items[B2]["holders"] == [] and items[B2]["pods"] == []
    # one entry per pod, its two processes' memory summed
    assert items[B1]["pods"] == [{"namespace": "prod", "pod": "serve-1", "service": "chat", "processes": 2,
                                  "used_memory_mib": 25_000.0}]


def _sql(api: Api, *statements: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(api.fleet.dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(main())


def test_health_is_derived_from_open_anomalies_and_sample_age(api: Api) -> None:
    # an open critical anomaly makes A1 critical in /gpus, /nodes and their counts, whatever its readings say
    _sql(api, "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, start_ts, summary) VALUES"
              f" ('fp-crit', 'xid', 'critical', '{A1}', 'node-a', now(), 'XID 79: fell off the bus')",
         "INSERT INTO gpu_inventory (gpu, node, first_seen, last_seen) VALUES"
         " ('GPU-silent', 'node-a', now() - interval '2 hours', now() - interval '2 hours')")
    try:
        gpus = {g["gpu"]: g for g in api.get("/gpus").json()["items"]}
        a1 = gpus[A1]
        assert a1["health"] == "critical" and a1["open_anomalies_by_severity"] == {"critical": 1}
        assert a1["reasons"] == ["critical xid: XID 79: fell off the bus"]
        silent = gpus["GPU-silent"]
        assert silent["health"] == "no_data" and silent["sample_age_seconds"] is None
        assert silent["reasons"] == ["no sample stored"]
        node = next(n for n in api.get("/nodes").json()["items"] if n["node"] == "node-a")
        assert node["health"] == {"critical": 1, "degraded": 1, "no_data": 1}
        on_node = [g for g in gpus.values() if g["node"] == "node-a"]
        assert node["open_anomalies"] == sum(g["open_anomalies"] for g in on_node) == 2
        assert node["open_anomalies_by_severity"] == {"critical": 1, "warning": 1}
    finally:
        _sql(api, "DELETE FROM anomalies WHERE fingerprint = 'fp-crit'",
             "DELETE FROM gpu_inventory WHERE gpu = 'GPU-silent'")


def test_nodes_and_node_detail(api: Api) -> None:
    nodes = {n["node"]: n for n in api.get("/nodes").json()["items"]}
    assert nodes["node-a"]["gpu_count"] == 2 and nodes["node-b"]["gpu_count"] == 2
    assert nodes["node-b"]["open_anomalies"] == 2
    gpus = api.get("/gpus").json()["items"]
    for name, n in nodes.items():  # /nodes counts exactly what /gpus shows
        assert n["open_anomalies"] == sum(g["open_anomalies"] for g in gpus if g["node"] == name)
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
    values = [v for v in raw["series"]["DCGM_FI_PROF_SM_ACTIVE"] if v is not None]
    assert raw["source"] == "raw" and len(values) == 180 and 180 <= len(raw["times"]) <= 181
    assert all(abs(v - 0.85) < 1e-9 for v in values)
    minute = api.get(f"/gpus/{A3}/series", metrics="DCGM_FI_PROF_SM_ACTIVE,DCGM_FI_DEV_POWER_USAGE",
                     start=f.start.isoformat(), end=f.end.isoformat(), step="1m").json()
    assert minute["source"] == "1m" and 30 <= len(minute["times"]) <= 31
    assert abs(minute["series"]["DCGM_FI_DEV_POWER_USAGE"][1] - 525.0) < 1e-6
    hour = api.get(f"/gpus/{A3}/series", start=start - 3600, end=end, step="1h").json()
    assert hour["source"] == "1h" and 2 <= len(hour["times"]) <= 3
    assert 1 <= len([v for v in hour["series"]["DCGM_FI_PROF_SM_ACTIVE"] if v is not None]) <= 2


def test_series_of_the_inference_figures_raw_and_rolled_up(api: Api) -> None:
    """The scraped rows are catalog rows: the series endpoint serves them like any other."""
    f = api.fleet
    start, end = f.start.timestamp(), f.end.timestamp()
    for step, source in (("10s", "raw"), ("1m", "1m")):
        got = api.get(f"/gpus/{B1}/series", metrics=f"{RPS},gpuwatch_inference_pending_requests", start=start,
                      end=end, step=step).json()
        assert got["source"] == source
        values = [v for v in got["series"][RPS] if v is not None]
        assert values and all(abs(v - 42.5) < 1e-9 for v in values)
        assert {v for v in got["series"]["gpuwatch_inference_pending_requests"] if v is not None} == {3.0}
    other = api.get(f"/gpus/{A3}/series", metrics=RPS, start=start, end=end, step="10s").json()
    assert all(v is None for v in other["series"][RPS])  # no scraped pod on A3: absent, never 0


def test_series_refuses_too_many_points_and_names_the_field(api: Api) -> None:
    resp = api.get(f"/gpus/{A3}/series", start=0, end=86400, step="1s")
    assert resp.status_code == 400
    body = resp.json()
    assert body["error"] == "too_many_points" and body["limit"] == 5000 and "5000" in body["message"]
    assert body["field"] == "step"


def test_series_answers_empty_buckets_as_nulls(api: Api) -> None:
    # the fleet has no data before its start: the hour before is all gaps, then readings
    f = api.fleet
    for step in ("1m", "30s"):
        s = api.get(f"/gpus/{A3}/series", metrics="DCGM_FI_PROF_SM_ACTIVE", start=f.start.timestamp() - 3600,
                    end=f.end.timestamp(), step=step).json()
        values = s["series"]["DCGM_FI_PROF_SM_ACTIVE"]
        step_s = s["step_seconds"]
        assert len(values) == len(s["times"])
        assert all(b - a == step_s for a, b in itertools.pairwise(s["times"]))
        assert s["times"][0] <= f.start.timestamp() - 3600 < s["times"][0] + step_s
        gap = [v for t, v in zip(s["times"], values, strict=True) if t + step_s <= f.start.timestamp()]
        assert len(gap) >= 3600 / step_s - 1 and all(v is None for v in gap)
        assert values[-2] is not None


def test_bad_parameters_answer_400_naming_the_field(api: Api) -> None:
    for params, field in (({"start": "yesterday"}, "start"), ({"step": "fast"}, "step"),
                          ({"metrics": "NOPE"}, "metrics"), ({"start": "2026-01-01T00:00:00"}, "start"),
                          ({"end": "9999-12-31T23:59:59-14:00"}, "end"),
                          ({"start": "0001-01-01T00:00:00+14:00"}, "start"),
                          ({"step": "1" * 21}, "step"), ({"step": "1" * 21 + "d"}, "step"),
                          ({"end": "1e300"}, "end"), ({"strat": "0"}, "strat")):
        resp = api.get(f"/gpus/{A3}/series", **params)
        assert resp.status_code == 400, (params, resp.text)
        body = resp.json()
        assert body["field"] == field and body["error"] == "bad_request" and field in body["message"]
    for path, params, field in (("/events", {"limit": "many"}, "limit"), ("/anomalies", {"limit": 0}, "limit"),
                                ("/alerts", {"status": "maybe"}, "status"), ("/gpus", {"nodes": "x"}, "nodes"),
                                ("/services/llm/history", {"end": "9999-12-31T23:59:59-14:00"}, "end"),
                                ("/anomalies", {"cursor": "an_nope"}, "cursor"), ("/me", {"x": "1"}, "x")):
        resp = api.get(path, **params)
        assert resp.status_code == 400 and resp.json()["field"] == field, (path, resp.text)
    resp = api.call("POST", "/silences", json={"matchers": {}, "duration_seconds": 60})
    assert resp.status_code == 400 and resp.json()["field"] == "matchers"
    assert api.get("/gpus/GPU-nope/series").status_code == 404


def test_unknown_service_is_404(api: Api) -> None:
    resp = api.get("/services/no-such-service/history")
    assert resp.status_code == 404 and resp.json()["error"] == "not_found"
    assert api.get("/services/llm/history", namespace="prod").status_code == 404  # llm runs in research
    assert api.get("/services/llm/history", namespace="research").status_code == 200


def test_service_history_from_rollups(api: Api) -> None:
    f = api.fleet
    resp = api.get("/services/llm/history", start=f.start.timestamp(), end=f.end.timestamp() + 900, step="5m")
    assert resp.status_code == 200, resp.text
    h = resp.json()
    assert h["price_per_gpu_hour"] == 2.5 and h["steps"]
    pods = {p["pod"]: p for p in h["pods"]}
    assert set(pods) == {"trainer-0", "trainer-1"}
    # trainer-1 held A3 for the whole 30 minutes (180 samples 10 s apart); trainer-0 held A1 for the first 15
    assert abs(pods["trainer-1"]["gpu_seconds"] - 1800) < 1e-6
    assert abs(pods["trainer-0"]["gpu_seconds"] - 900) < 1e-6
    assert abs(pods["trainer-1"]["running_seconds"] - 1800) < 1e-6
    assert abs(pods["trainer-1"]["gpus_while_running"] - 1.0) < 1e-9
    assert abs(pods["trainer-1"]["gpus_window_avg"] - 1800 / h["range_seconds"]) < 1e-9
    assert abs(pods["trainer-1"]["sm_active"] - 0.85) < 1e-6
    assert abs(pods["trainer-1"]["memory_used_mib_while_running"] - 42_000) < 1e-6
    total = h["total"]
    assert abs(total["gpu_seconds"] - sum(s["gpu_seconds"] or 0 for s in h["steps"])) < 1e-6
    assert abs(total["cost"] - total["gpu_seconds"] / 3600 * 2.5) < 1e-9
    # energy: 525 W on A3 for 1800 s plus 550 W on A1 for 900 s
    assert abs(total["energy_kwh"] - (525 * 1800 + 550 * 900) / 3.6e6) < 1e-9
    # while both trainers ran the service held 2 GPUs; the last step (after the data) is a gap
    assert abs(h["steps"][1]["gpus_while_running"] - 2.0) < 1e-9
    assert set(h["steps"][-1].values()) == {None, h["steps"][-1]["t"]}
    assert api.get("/services/llm/history", step="30s").json()["field"] == "step"
    # a pod of two processes: both processes' memory
    chat = api.get("/services/chat/history", start=f.start.timestamp(), end=f.end.timestamp() + 60).json()
    assert abs(chat["pods"][0]["memory_used_mib_while_running"] - 25_000) < 1e-6


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
        steps = sum(s["gpu_seconds"] or 0 for s in h["steps"])
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
        # the same buckets where the store has rows; the API also answers the empty ones, as nulls
        present = [i for i, v in enumerate(got["series"][keys[0]]) if v is not None]
        assert [got["times"][i] for i in present] == [t.timestamp() for t in want.times]
        for k in keys:
            assert [got["series"][k][i] for i in present] == [None if v is None else float(v) for v in want.values[k]]
