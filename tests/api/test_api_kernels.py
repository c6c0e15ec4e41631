"""``/services/{name}/kernels`` and its flame graph over the API fixture's CUPTI windows (tests/api/conftest.py).

Why these checks: the figures are shares and rates of sums the store makes, so each is
stated from the hand-made windows (tests/support/kernel_windows.py); a namespace-scoped
token must see its namespace's rows only, and another namespace's service exactly as a
service without data; the flame graph must be the nested set Grafana's panel rebuilds.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tests.support.kernel_windows import ADD, ATTENTION, GEMM, TRAIN_NS


def _range(api: Api) -> dict[str, Any]:
    return {"since": api.fleet.start.timestamp(), "until": api.fleet.end.timestamp() + 60}


def test_kernels_need_a_token(api: Api) -> None:
    for path in ("/services/llm/kernels", "/services/llm/kernels/flamegraph"):
        resp = api.get(path, token=None)
        assert resp.status_code == 401 and resp.json()["error"] == "unauthorized"


def test_a_service_s_kernels_shares_rates_copies_and_hints(api: Api) -> None:
    resp = api.get("/services/llm/kernels", **_range(api))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    cov = body["coverage"]
    # research's trainer-1 (6 windows) and trainer-0 (2), prod's batch-0 (2): one service name, two namespaces
    assert (cov["windows"], cov["processes"], cov["pods"], cov["nodes"], cov["recorded_seconds"]) == (10, 3, 3, 1, 10.0)
    gemm_ns = 8 * TRAIN_NS[GEMM] + 2 * 3 * TRAIN_NS[GEMM]
    all_ns = gemm_ns + 10 * (TRAIN_NS[ATTENTION] + TRAIN_NS[ADD])
    assert body["kernel_seconds"] == pytest.approx(all_ns / 1e9) and body["kernel_names"] == 3
    assert [k["name"] for k in body["kernels"]] == [GEMM, ATTENTION, ADD]
    gemm, attention, add = body["kernels"]
    assert gemm["share"] == pytest.approx(gemm_ns / all_ns) and gemm["category"] == "gemm"
    assert gemm["calls"] == 10_000 and gemm["calls_per_second"] == 1000.0
    assert gemm["mean_us"] == pytest.approx(gemm_ns / 10_000 / 1e3) and gemm["p95_us"] == 700.0
    assert (gemm["grid"], gemm["block"], gemm["registers"], gemm["occupancy"]) == ([132, 1, 1], [384, 1, 1], 168,
                                                                                    0.375)
    assert (attention["category"], add["category"], add["short_calls"]) == ("attention", "elementwise", 90_000)
    assert len(gemm["trend"]) == len(body["buckets"]) == 12
    assert sum(k["share"] for k in body["kernels"]) == pytest.approx(1.0)
    for i, b in enumerate(body["buckets"]):  # where a bucket has kernel time, the shares add up to 1
        shares = [k["trend"][i] for k in body["kernels"]]
        assert (b["kernel_seconds"] > 0) == all(s is not None for s in shares)
        if b["kernel_seconds"] > 0:
            assert sum(shares) == pytest.approx(1.0, abs=1e-3)
    assert sum(b["windows"] for b in body["buckets"]) == 10
    assert [(c["kind"], c["memory"], c["calls"]) for c in body["copies"]] == [
        ("HtoD", "pageable", 1000), ("HtoD", "pinned", 100), ("DtoH", "pinned", 10_000)]
    assert body["copies"][0]["bytes_per_second"] == 200 << 20
    assert body["syncs"] == {"calls": 2000, "time_seconds": 1.0, "calls_per_second": 200.0}
    assert body["launches"]["calls_per_second"] == 11_100.0 and body["memsets"]["calls"] == 200
    assert body["gpu"]["idle_gaps"] == 5000
    assert body["gpu"]["idle_share"] == pytest.approx(2.0 / (8 * 0.8 + 2 * 2.4 + 2.0), abs=1e-4)
    hints = {h["kind"]: h for h in body["hints"]}
    assert set(hints) == {"kernel_fusion", "low_occupancy", "pageable_copies", "sync_heavy"}
    assert hints["kernel_fusion"]["kernels"] == [ADD] and "CUDA Graphs" in hints["kernel_fusion"]["message"]
    assert hints["low_occupancy"]["kernels"] == [ATTENTION]
    assert "pin_memory=True" in hints["pageable_copies"]["message"]


def test_limit_namespace_and_defaults(api: Api) -> None:
    one = api.get("/services/llm/kernels", limit=1, **_range(api)).json()
    assert [k["name"] for k in one["kernels"]] == [GEMM] and one["kernel_names"] == 3
    prod = api.get("/services/llm/kernels", namespace="prod", **_range(api)).json()
    assert (prod["namespace"], prod["coverage"]["windows"], prod["coverage"]["pods"]) == ("prod", 2, 1)
    default = api.get("/services/llm/kernels")  # the last hour: the fixture's windows are in it
    assert default.status_code == 200 and default.json()["coverage"]["windows"] == 10
    assert default.json()["bucket_seconds"] == 300.0


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"), ({"until": "1e400"}, "until"),
    ({"since": 2_000_000_000, "until": 1_000_000_000}, "since"), ({"since": 0, "until": 86400 * 40}, "since"),
    ({"limit": 0}, "limit"), ({"limit": 201}, "limit"), ({"start": 0}, "start"),
])
def test_bad_parameters_are_400s_naming_the_field(api: Api, params: dict[str, Any], field: str) -> None:
    for path in ("/services/llm/kernels", "/services/llm/kernels/flamegraph"):
        if path.endswith("flamegraph") and field == "limit":
            continue
        resp = api.get(path, **params)
        assert resp.status_code == 400, resp.text
        assert resp.json()["field"] == field and "Traceback" not in resp.text


def test_a_scoped_token_sees_its_namespace_only_and_others_as_no_data(api: Api) -> None:
    rng = _range(api)
    research = api.get("/services/llm/kernels", token="research", **rng).json()
    assert (research["coverage"]["windows"], research["coverage"]["pods"]) == (8, 2)
    assert research["kernel_seconds"] == pytest.approx(8 * 0.8)  # batch-0's GEMM time is not in it
    assert "batch-0" not in str(research) and "prod" not in str(research)
    hidden = api.get("/services/chat/kernels", token="research", **rng)
    empty = api.get("/services/chat/kernels", since=rng["since"] - 7200, until=rng["since"] - 3600)
    assert hidden.status_code == empty.status_code == 404
    assert hidden.json() == empty.json()  # the same answer as a range without windows: nothing to count
    assert api.get("/services/chat/kernels", **rng).status_code == 200  # an unscoped token sees it
    for path in ("/services/llm/kernels", "/services/llm/kernels/flamegraph"):
        nobody = api.get(path, token="nobody", **rng)
        missing = api.get(path.replace("llm", "no-such-service"), **rng)
        assert nobody.status_code == missing.status_code == 404
        assert nobody.json()["error"] == missing.json()["error"] == "not_found"
    flame = api.get("/services/llm/kernels/flamegraph", token="research", **rng).json()
    labels = next(f["values"] for f in flame["fields"] if f["name"] == "label")
    assert "trainer-0" in labels and "batch-0" not in labels


def _children_ok(level: list[int], value: list[int], self_: list[int], label: list[str]) -> None:
    """Nested-set order: depth first, each node's value = its self + its children's values."""
    assert level[0] == 0 and level.count(0) == 1
    for i in range(1, len(level)):
        assert 1 <= level[i] <= level[i - 1] + 1
    for i in range(len(level)):
        children, j = [], i + 1
        while j < len(level) and level[j] > level[i]:
            if level[j] == level[i] + 1:
                children.append(j)
            j += 1
        assert value[i] == self_[i] + sum(value[c] for c in children), label[i]
        names = [label[c] for c in children]
        assert names == sorted(names)


def test_the_flame_graph_frame(api: Api) -> None:
    resp = api.get("/services/llm/kernels/flamegraph", **_range(api))
    assert resp.status_code == 200, resp.text
    frame = resp.json()
    assert frame["meta"]["preferredVisualisationType"] == "flamegraph"
    assert frame["meta"]["custom"]["service"] == "llm"
    f = {x["name"]: x["values"] for x in frame["fields"]}
    assert [x["name"] for x in frame["fields"]] == ["level", "value", "self", "label"]
    _children_ok(f["level"], f["value"], f["self"], f["label"])
    rows = list(zip(f["level"], f["label"], f["value"], strict=True))
    gemm_us = (8 * TRAIN_NS[GEMM] + 2 * 3 * TRAIN_NS[GEMM]) // 1000
    assert rows[0][:2] == (0, "total") and rows[1][:2] == (1, "llm")
    assert [label for level, label, _ in rows if level == 2] == ["batch-0", "trainer-0", "trainer-1"]
    assert rows[2] == (2, "batch-0", 2 * (3 * TRAIN_NS[GEMM] + TRAIN_NS[ATTENTION] + TRAIN_NS[ADD]) // 1000)
    assert [label for level, label, _ in rows[2:6]] == ["batch-0", "attention", ATTENTION, "elementwise"]
    assert sum(v for level, label, v in rows if label == GEMM) == gemm_us
    assert f["value"][0] == sum(v for level, _, v in rows if level == 4)
