"""Authorisation: roles, JSON 401/403 answers, and namespace scopes on every endpoint.

The research-scoped token must get nothing of the prod namespace from any endpoint:
no names, no GPUs that only prod held, and no counts that include them.
"""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import A1, A3, B1, PROD_MARKERS, Api

#: Every GET path of the API with the path values to try (visible and invisible ones).
GET_CALLS: dict[str, list[str]] = {
    "/api/v1/gpus": ["/gpus"],
    "/api/v1/gpus/{uuid}/series": [f"/gpus/{A1}/series", f"/gpus/{A3}/series", f"/gpus/{B1}/series"],
    "/api/v1/nodes": ["/nodes"],
    "/api/v1/nodes/{node}": ["/nodes/node-a", "/nodes/node-b"],
    "/api/v1/services": ["/services"],
    "/api/v1/services/{name}/history": ["/services/llm/history", "/services/chat/history",
                                        "/services/etl/history"],
    "/api/v1/services/{name}/kernels": ["/services/llm/kernels", "/services/chat/kernels"],
    "/api/v1/services/{name}/kernels/flamegraph": ["/services/llm/kernels/flamegraph",
                                                   "/services/chat/kernels/flamegraph"],
    "/api/v1/events": ["/events"],
    "/api/v1/anomalies": ["/anomalies"],
    "/api/v1/anomalies/{anomaly_id}/profile": [],  # every anomaly's, visible or not (ids listed by an admin)
    "/api/v1/alerts": ["/alerts"],
    "/api/v1/silences": ["/silences"],
    "/api/v1/me": ["/me"],
    "/api/v1/tokens": ["/tokens"],
    "/api/v1/settings": ["/settings"],
    "/api/v1/gpu-facts": ["/gpu-facts"],
}


def test_every_get_endpoint_is_covered(api: Api) -> None:
    doc = api.client.get("/api/v1/openapi.json").json()
    gets = {path for path, ops in doc["paths"].items() if "get" in ops}
    assert gets == set(GET_CALLS)


@pytest.mark.parametrize("token", ["research", "research_op", "research_admin", "nobody"])
def test_a_scoped_token_gets_nothing_of_other_namespaces(api: Api, token: str) -> None:
    f = api.fleet
    doc = api.client.get("/api/v1/openapi.json").json()
    for template, paths in GET_CALLS.items():
        takes = {p["name"] for p in doc["paths"][template]["get"].get("parameters", []) if p["in"] == "query"}
        span = {"start": f.start.timestamp() - 120, "end": f.end.timestamp() + 120} if "start" in takes else {}
        if "since" in takes:  # the kernel routes' names for the same range
            span = {"since": f.start.timestamp() - 120, "until": f.end.timestamp() + 120}
        if template.endswith("/profile"):
            everyone = api.get("/anomalies", start=f.start.timestamp() - 3600, end=f.end.timestamp() + 3600)
            paths = [f"/anomalies/{a['id']}/profile" for a in everyone.json()["items"]]
            assert len(paths) >= 3
        for path in paths:
            resp = api.get(path, token=token, **span)
            assert resp.status_code in (200, 403, 404), (path, resp.text)
            text = resp.text
            leaked = [m for m in PROD_MARKERS if m in text and m not in path]  # a 404 may echo the path
            assert not leaked, f"{token} got {leaked} from {path}: {text[:500]}"


def test_research_sees_its_own_and_only_its_own_counts(api: Api) -> None:
    f = api.fleet
    gpus = api.get("/gpus", token="research").json()["items"]
    assert [g["gpu"] for g in gpus] == [A3]  # A1's newest holder is prod
    assert gpus[0]["open_anomalies"] == 1
    nodes = api.get("/nodes", token="research").json()["items"]
    assert [(n["node"], n["gpu_count"], n["open_anomalies"]) for n in nodes] == [("node-a", 1, 1)]
    assert api.get("/nodes/node-b", token="research").status_code == 404
    services = api.get("/services", token="research").json()["items"]
    assert [(s["namespace"], s["service"], s["gpu_count"]) for s in services] == [("research", "llm", 1)]
    # A1's series: only the first 15 minutes, when research held it
    raw = api.get(f"/gpus/{A1}/series", token="research", start=f.start.timestamp(), end=f.end.timestamp(),
                  step="10s", metrics="DCGM_FI_PROF_SM_ACTIVE").json()
    held = [(t, v) for t, v in zip(raw["times"], raw["series"]["DCGM_FI_PROF_SM_ACTIVE"], strict=True) if v is not None]
    assert len(held) == 90 and max(t for t, _ in held) < (f.start.timestamp() + 900)
    assert all(abs(v - 0.9) < 1e-9 for _, v in held)
    minute = api.get(f"/gpus/{A1}/series", token="research", start=f.start.timestamp(), end=f.end.timestamp(),
                     step="1m", metrics="DCGM_FI_PROF_SM_ACTIVE").json()
    held_minutes = [v for v in minute["series"]["DCGM_FI_PROF_SM_ACTIVE"] if v is not None]
    assert minute["source"] == "1m" and 15 <= len(held_minutes) <= 16
    assert api.get(f"/gpus/{B1}/series", token="research").status_code == 404
    events = api.get("/events", token="research").json()["items"]
    assert [e["detail"] for e in events] == ["research-time xid"]
    assert len(api.get("/anomalies", token="research").json()["items"]) == 1
    assert len(api.get("/alerts", token="research").json()["items"]) == 1
    assert len(api.get("/silences", token="research_op").json()["items"]) == 1
    assert api.get("/silences", token="research").status_code == 403  # silences are for operators
    chat = api.get("/services/chat/history", token="research")
    assert chat.status_code == 404 and "chat" in chat.json()["message"]  # as unknown as a service that never ran
    own = api.get("/services/llm/history", token="research", start=f.start.timestamp(),
                  end=f.end.timestamp() + 60).json()
    assert {p["pod"] for p in own["pods"]} == {"trainer-0", "trainer-1"}


def test_unscoped_viewer_sees_everything(api: Api) -> None:
    assert len(api.get("/anomalies", token="viewer").json()["items"]) == 3
    assert len(api.get("/events", token="viewer").json()["items"]) == 3


def test_missing_or_bad_tokens_get_json_401(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Bearer gw_unknown"},
                    {"Authorization": "Basic abc"}):
        resp = api.client.get("/api/v1/gpus", headers=headers)
        assert resp.status_code == 401, headers
        assert resp.json()["error"] == "unauthorized" and resp.json()["message"]
        assert resp.headers["www-authenticate"].startswith("Bearer")


def test_roles_get_json_403(api: Api) -> None:
    resp = api.call("POST", "/silences", token="viewer", json={"matchers": {"namespace": "x"},
                                                               "duration_seconds": 60})
    assert resp.status_code == 403 and "operator" in resp.json()["message"]
    for token in ("viewer", "operator"):
        resp = api.get("/tokens", token=token)
        assert resp.status_code == 403 and resp.json()["error"] == "forbidden"


def test_scoped_operator_silences_only_its_namespaces(api: Api) -> None:
    for matchers in ({"namespace": "prod"}, {"service": "llm"}):
        resp = api.call("POST", "/silences", token="research_op", json={"matchers": matchers,
                                                                         "duration_seconds": 600})
        assert resp.status_code == 403 and resp.json()["field"] == "matchers"
    resp = api.call("POST", "/silences", token="research_op",
                    json={"matchers": {"namespace": "research", "service": "llm"}, "duration_seconds": 600,
                          "comment": "maintenance"})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert created["matchers"] == {"namespace": "research", "service": "llm"}
    assert created["created_by"].endswith("(research_op)")
    prod_id = next(s["id"] for s in api.get("/silences").json()["items"] if s["matchers"].get("namespace") == "prod")
    assert api.call("DELETE", f"/silences/{prod_id}", token="research_op").status_code == 404
    forged = api.call("DELETE", "/silences/si_AAAAAAAAAAAAAAAAAAAAAA", token="research_op")
    assert forged.status_code == 400 and forged.json()["field"] == "silence_id"
    # created_by: the creating token and admins see it, another operator does not
    def created_by(token: str) -> str:
        return next(s["created_by"] for s in api.get("/silences", token=token).json()["items"]
                    if s["id"] == created["id"])
    assert created_by("research_op") == created["created_by"] and created_by("admin") == created["created_by"]
    assert created_by("research_admin") == created["created_by"]  # an admin of that namespace
    assert created_by("operator") == "redacted"
    assert {s["created_by"] for s in api.get("/silences", token="research_op").json()["items"]
            if s["id"] != created["id"]} == {"redacted"}
    ended = api.call("DELETE", f"/silences/{created['id']}", token="research_op")
    assert ended.status_code == 200
    assert created["id"] not in [s["id"] for s in api.get("/silences", token="research_op", active="true")
                                 .json()["items"]]
    bad = api.call("POST", "/silences", token="operator", json={"matchers": {"namespace": "x"}})
    assert bad.status_code == 400 and bad.json()["field"] == "ends_at"


def test_tokens_admin_and_scoped_admin(api: Api) -> None:
    resp = api.call("POST", "/tokens", json={"role": "viewer", "namespaces": ["research"], "name": "ci"})
    assert resp.status_code == 201, resp.text
    made = resp.json()
    assert made["token"].startswith("gw_") and made["namespaces"] == ["research"]
    listing = api.get("/tokens").json()["items"]
    assert all("token" not in t for t in listing) and made["id"] in [t["id"] for t in listing]
    headers = {"Authorization": f"Bearer {made['token']}"}
    assert api.client.get("/api/v1/me", headers=headers).json()["namespaces"] == ["research"]
    assert api.call("DELETE", f"/tokens/{made['id']}").status_code == 200
    assert api.client.get("/api/v1/me", headers=headers).status_code == 401
    # a scoped admin cannot widen its scope, and sees only tokens inside it
    wider = api.call("POST", "/tokens", token="research_admin", json={"role": "viewer"})
    assert wider.status_code == 403
    visible = api.get("/tokens", token="research_admin").json()["items"]
    assert visible and all(t["namespaces"] and set(t["namespaces"]) <= {"research"} for t in visible)
    bad = api.call("POST", "/tokens", json={"role": "viewer", "namespaces": ["Not_A_Namespace"]})
    assert bad.status_code == 400 and bad.json()["field"] == "namespaces"


def test_tokens_are_stored_hashed(api: Api) -> None:
    secret = api.fleet.tokens["viewer"]
    listing = json.dumps(api.get("/tokens").json())
    assert secret not in listing and secret[3:] not in listing


def test_ids_are_opaque_stable_and_page_through(api: Api) -> None:
    import asyncio

    import asyncpg

    async def row_ids() -> set[str]:
        conn = await asyncpg.connect(api.fleet.dsn)
        try:
            return {str(r["id"]) for t in ("anomalies", "alerts", "silences")
                    for r in await conn.fetch(f"SELECT id FROM {t}")}  # t: constants
        finally:
            await conn.close()

    anomalies = api.get("/anomalies").json()["items"]
    alerts = api.get("/alerts").json()["items"]
    assert all(a["id"].startswith("an_") and len(a["id"]) == 25 for a in anomalies)
    assert {a["anomaly_id"] for a in alerts} <= {a["id"] for a in anomalies}  # the same id wherever it appears
    research = api.get("/anomalies", token="research").json()["items"]
    assert [a["id"] for a in research] == [a["id"] for a in anomalies if a["namespace"] == "research"]
    raw = asyncio.run(row_ids())
    shown = [a["id"] for a in anomalies] + [a["id"] for a in alerts]
    # the body is url-safe base64 of a keyed permutation: it may hold "_" and runs of digits by
    # chance (a clean-clone CI run drew one), but never the row id itself
    bodies = {i[3:] for i in shown}
    assert not any(b.isdigit() for b in bodies) and not raw & (bodies | set(shown))
    # cursors are opaque too, and page through every row once
    seen, cursor = [], None
    while True:
        page = api.get("/anomalies", limit=1, **({"cursor": cursor} if cursor else {})).json()
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor.startswith("an_")
    assert seen == [a["id"] for a in anomalies]
    wrong_kind = api.get("/alerts", cursor=anomalies[0]["id"])
    assert wrong_kind.status_code == 400 and wrong_kind.json()["field"] == "cursor"
