"""The chart's workloads, started from the rendered manifests, against real backends.

The stack (:mod:`tests.deploy.live`): the rendered DaemonSet's agent with ``--simulate 4``,
the rendered Deployment's collector, tansu, PostgreSQL and a Prometheus that scrapes both
as the rendered ServiceMonitors say and loads the rendered PrometheusRule. Then every
PromQL query of every dashboard must return data, and every label it groups by must be on
the series it reads.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import http_get, wait_until
from tests.deploy.dashboards import Query, all_queries, grouping_labels, metric_names, substitute, variables
from tests.deploy.helm import ROOT
from tests.deploy.live import AGENT_POD, NODE, Stack, execute, ok

PROMQL = [q for q in all_queries() if q.kind == "promql"]


def test_the_agent_runs_from_the_daemonset_and_sends(stack: Stack) -> None:
    assert http_get(f"{stack.agent_url}/healthz").status == 200
    text = http_get(f"{stack.agent_url}/metrics").text
    assert f'Hostname="{NODE}"' in text  # NODE_NAME from the downward API
    assert "DCGM_FI_PROF_SM_ACTIVE{" in text
    wait_until(lambda: "gpuwatch_agent_kafka_connected 1.0" in http_get(f"{stack.agent_url}/metrics").text,
               timeout=30, what="the agent connected to Kafka", details=stack.agent.log_tail)
    # the spool is where the manifest mounts it (a hostPath here mapped to a directory)
    assert stack.agent.env["GPUWATCH_SPOOL_DIR"] == stack.agent.host_path("/var/lib/gpuwatch/spool")
    assert Path(stack.agent.env["GPUWATCH_SPOOL_DIR"]).is_dir()
    # so is the kernel probe's socket, bound by the agent, writable by workloads of any uid
    probe = Path(stack.agent.env["GPUWATCH_PROBE_SOCKET"])
    assert probe == Path(stack.agent.host_path("/run/gpuwatch/probe.sock"))
    assert probe.is_socket() and probe.stat().st_mode & 0o777 == 0o666


def test_the_images_healthchecks_pass_against_the_running_processes(stack: Stack) -> None:
    from tests.test_dockerfile import final_stage, parse

    for dockerfile, pod in (("Dockerfile.agent", stack.agent), ("Dockerfile.collector", stack.collector)):
        (check,) = [i.args for i in final_stage(parse((ROOT / dockerfile).read_text())) if i.keyword == "HEALTHCHECK"]
        argv = json.loads(check.partition("CMD ")[2])
        argv[0] = str(Path(pod.argv[0]).with_name("python"))
        proc = subprocess.run(argv, env=pod.env, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, f"{dockerfile} HEALTHCHECK failed: {proc.stderr}"


def test_the_rendered_probes_answer_against_the_running_processes(stack: Stack) -> None:
    for kind, url in (("DaemonSet", stack.agent_url), ("Deployment", stack.api_url)):
        (container,) = stack.rendered.one(kind)["spec"]["template"]["spec"]["containers"]
        paths = {p: container[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")
                 if p in container}
        assert {"livenessProbe", "readinessProbe"} <= set(paths), f"{kind} lacks a probe: {paths}"
        for probe, path in paths.items():
            wait_until(lambda target=url + path: ok(target), timeout=30,
                       what=f"the {kind}'s {probe} ({path}) answers 200")


def test_the_collector_stores_what_the_agent_sent(stack: Stack) -> None:
    count = wait_until(lambda: asyncio.run(execute(stack.dsn, "SELECT count(*) FROM gpu_samples WHERE node = $1",
                                                    NODE)) or None,
                       timeout=60, what="samples of the live agent stored", details=stack.collector.log_tail)
    assert count > 0
    # the admin token from NOTES.txt reads them through the API
    req = urllib.request.Request(f"{stack.api_url}/api/v1/gpus", headers={
        "Authorization": f"Bearer {stack.tokens['admin']}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    assert {g["node"] for g in body["items"]} == {NODE}, body
    assert http_get(f"{stack.api_url}/api/v1/gpus").status == 401  # and nothing without one


def test_honor_labels_keep_the_workloads_pod_labels(stack: Stack) -> None:
    prom = stack.prometheus
    series = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{job="gpuwatch-agent"}', lambda r: len(r) >= 4)
    pods = {s["metric"].get("pod", "") for s in series}
    assert AGENT_POD not in pods, "the agent pod's target label replaced the GPU's pod"
    assert pods - {""}, f"no GPU carries its workload's pod: {pods}"
    assert not [s for s in series if "exported_pod" in s["metric"]]
    info = prom.wait_for('gpuwatch_agent_info{job="gpuwatch-agent"}')
    assert info[0]["metric"]["pod"] == AGENT_POD  # the agent's own series keep the target labels


def test_the_rendered_rules_load_and_evaluate(stack: Stack) -> None:
    def evaluated() -> list[dict[str, Any]] | None:
        groups = stack.prometheus.api("/api/v1/rules", {})["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2") and
                                      not r["lastEvaluation"].startswith("0001") for r in rules) else None

    rules = wait_until(evaluated, timeout=20, what="every rule evaluated")
    assert {r["name"] for r in rules} >= {"GpuwatchGpuLost", "GpuwatchCollectorLagging"}
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    firing = [r["name"] for r in rules if r.get("state") == "firing"]
    assert "GpuwatchAgentDown" not in firing and "GpuwatchCollectorDown" not in firing, firing


def _label_values(stack: Stack, label: str, match: str, what: str) -> list[str]:
    """Grafana's ``label_values(match, label)``, waited for like any query (series of a metric
    appear when the process first has one to show, e.g. once a GPU has a process)."""
    found: list[str] = wait_until(lambda: stack.prometheus.label_values(label, match) or None, timeout=30,
                                  what=f"{what}: label_values({match}, {label})", details=stack.prometheus.log_tail)
    return found


def _promql_values(stack: Stack, uid: str) -> dict[str, str | list[str]]:
    values: dict[str, str | list[str]] = {"__rate_interval": "10s", "__interval": "5s", "datasource": "prometheus"}
    for var in variables(uid):
        if var["type"] == "query" and var.get("datasource", {}).get("type") == "prometheus":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"])
            assert m, var["query"]
            found = _label_values(stack, m[2], substitute(m[1], values, sql=False), f"variable {var['name']} of {uid}")
            values[var["name"]] = ".*" if var.get("includeAll") else found[0]
    return values


@pytest.mark.parametrize("query", PROMQL, ids=[q.id for q in PROMQL])
def test_every_promql_query_returns_data(stack: Stack, query: Query) -> None:
    values = _promql_values(stack, query.dashboard)
    text = query.text
    if text.startswith("label_values("):
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert m
        _label_values(stack, m[2], substitute(m[1], values, sql=False), query.id)
        return
    expr = substitute(text, values, sql=False)
    assert "$" not in expr, f"an unsubstituted variable in {expr}"
    result = stack.prometheus.wait_for(expr, timeout=30)
    assert all(r["value"][1] not in ("NaN",) for r in result) or len(result) > 1, f"{query.id}: {result}"
    names = metric_names(expr)
    for label in grouping_labels(expr) - {"instance"}:
        selector = "{__name__=~\"" + "|".join(sorted(names)) + "\"}"
        # fails (times out naming the query) when no series of these metrics carries the label
        stack.prometheus.wait_for(f"count by ({label}) ({selector})",
                                  lambda found, label=label: any(r["metric"].get(label) for r in found), timeout=20)


def test_every_metric_the_dashboards_and_rules_use_is_scraped(stack: Stack) -> None:
    rules = stack.rendered.one("PrometheusRule")["spec"]["groups"]
    used = {n for q in PROMQL for n in metric_names(re.sub(r"^label_values\((.+),\s*\w+\)$", r"\1", q.text))}
    used |= {n for g in rules for r in g["rules"] for n in metric_names(r["expr"])}
    missing: list[set[str]] = [used]

    def all_scraped() -> bool:
        missing[0] = used - set(stack.prometheus.api("/api/v1/label/__name__/values", {}))
        return not missing[0]

    wait_until(all_scraped, timeout=30, interval=0.5, what="every metric the dashboards and rules use scraped",
               details=lambda: f"never scraped: {sorted(missing[0])}")
