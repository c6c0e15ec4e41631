"""The chart's workloads, started from the rendered manifests, against real backends.

What a cluster would run, on loopback: the agent container of the rendered DaemonSet (its
command, env and mounts, with ``--simulate 4``) sends frames to a real Kafka-protocol broker
(tansu); the collector container of the rendered Deployment consumes them into a real
PostgreSQL; the first tokens are made with the command NOTES.txt prints; a real Prometheus
scrapes both as the rendered ServiceMonitors say (honorLabels, path, the bearer token, the
target labels prometheus-operator adds) and loads the rendered PrometheusRule. Then every
PromQL query of every dashboard must return data, and every label it groups by must be on
the series it reads.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import PrometheusServer, free_port, http_get, wait_until
from tests.deploy.dashboards import Query, all_queries, grouping_labels, metric_names, substitute, variables
from tests.deploy.databases import fresh_database
from tests.deploy.helm import ROOT, Chart, Rendered, value_set
from tests.deploy.pods import LocalPod, materialize
from tests.fixtures_kafka import KafkaBroker, create_topic
from tests.fixtures_pg import PgServer

NAMESPACE = "gpuwatch"
NODE = "gpu-node-live"
AGENT_POD = "gpuwatch-agent-x7k2p"
COLLECTOR_POD = "gpuwatch-collector-5d9f8-abcde"
PROMQL = [q for q in all_queries() if q.kind == "promql"]


@dataclass
class Stack:
    rendered: Rendered
    agent: LocalPod
    collector: LocalPod
    agent_url: str
    api_url: str
    dsn: str
    prometheus: PrometheusServer
    tokens: dict[str, str]
    notes: str


def _token(collector: LocalPod, notes: str, role: str) -> str:
    """Run NOTES.txt's `kubectl exec ... -- gpuwatch token create ... --role ROLE` inside our 'pod'."""
    m = re.search(rf"-- \\\n\s+(gpuwatch token create [^\n]*--role {role}[^\n)]*)", notes)
    assert m, f"NOTES.txt has no token command for role {role}:\n{notes}"
    argv = [collector.host_path(a) for a in shlex.split(m[1].replace(" 2>/dev/null", ""))]
    argv[0] = collector.argv[0]  # the same gpuwatch the container runs
    proc = subprocess.run(argv, env=collector.env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    assert token.startswith("gw_"), proc.stdout
    return token


def _scrape_config(rendered: Rendered, ports: dict[str, int], token: str) -> list[dict[str, Any]]:
    """One job per rendered ServiceMonitor, as prometheus-operator would generate it (scrape every 1 s)."""
    jobs = []
    for sm in rendered.of_kind("ServiceMonitor"):
        service = next(s for s in rendered.of_kind("Service")
                       if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items())
        (endpoint,) = sm["spec"]["endpoints"]
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        job: dict[str, Any] = {
            "job_name": service["metadata"]["name"],  # the operator's default job label: the Service's name
            "honor_labels": endpoint.get("honorLabels", False),
            "metrics_path": endpoint.get("path", "/metrics"),
            "scrape_interval": "1s", "scrape_timeout": "1s",
            "static_configs": [{
                "targets": [f"127.0.0.1:{ports[component]}"],
                "labels": {"namespace": NAMESPACE, "service": service["metadata"]["name"],
                           "endpoint": endpoint["port"], "container": component,
                           "pod": AGENT_POD if component == "agent" else COLLECTOR_POD},
            }],
        }
        if "authorization" in endpoint:
            job["authorization"] = {"type": endpoint["authorization"]["type"], "credentials": token}
        jobs.append(job)
    return jobs


def _start_prometheus(prometheus_bin: str, workdir: Path, jobs: list[dict[str, Any]],
                      rules: list[dict[str, Any]]) -> PrometheusServer:
    rules_path = workdir / "gpuwatch-rules.yaml"
    rules_path.write_text(json.dumps({"groups": rules}))
    config = workdir / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                  "rule_files": [str(rules_path)], "scrape_configs": jobs}))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen([prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={workdir}/data",
                                    f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, workdir, log, "gpuwatch")
    try:
        wait_until(lambda: process.poll() is None and _ok(f"{server.url}/-/ready"), timeout=30,
                   what="Prometheus ready", details=server.log_tail)
    except BaseException:
        server.stop()
        raise
    return server


def _ok(url: str) -> bool:
    try:
        return http_get(url, timeout=2).status == 200
    except OSError:
        return False


def _wait_serving(pod: LocalPod, url: str) -> None:
    def probe() -> bool:
        if not pod.running():
            pytest.fail(f"{pod.argv[1]} exited:\n{pod.log_tail()}", pytrace=False)
        return _ok(url)

    wait_until(probe, timeout=60, what=url, details=pod.log_tail)


async def _execute(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def stack(pg_server: PgServer, tansu_bin: Path, prometheus_bin: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("live")
    with fresh_database(pg_server, "live") as dsn:
        yield from _stack(dsn, tansu_bin, prometheus_bin, workdir)


def _stack(dsn: str, tansu_bin: Path, prometheus_bin: str, workdir: Path) -> Iterator[Stack]:
    broker = KafkaBroker(tansu_bin, free_port(), workdir, "memory://tansu/").start()
    pods: list[LocalPod] = []
    prometheus: PrometheusServer | None = None
    try:
        for topic, partitions in (("gpu.telemetry", 3), ("gpu.telemetry.dlq", 1), ("gpu.telemetry.control", 1)):
            create_topic(broker.bootstrap, topic, partitions)
        ports = {"agent": free_port(), "collector": free_port()}
        values = value_set("defaults")
        values["kafka"]["bootstrap"] = broker.bootstrap
        values["database"] = {"dsn": dsn}
        values["agent"] = {"port": ports["agent"]}
        values["collector"] = {"api": {"port": ports["collector"]}, "replicas": 1}
        chart = Chart(namespace=NAMESPACE)
        rendered = chart.render(values)
        notes = chart.notes(values)
        agent = materialize(rendered, "DaemonSet", "agent", workdir / "agent", node_name=NODE, pod_name=AGENT_POD,
                            extra_args=["--simulate", "4"])
        collector = materialize(rendered, "Deployment", "collector", workdir / "collector", node_name="cpu-node-1",
                                pod_name=COLLECTOR_POD)
        pods += [collector.start(), agent.start()]
        agent_url, api_url = f"http://127.0.0.1:{ports['agent']}", f"http://127.0.0.1:{ports['collector']}"
        _wait_serving(agent, f"{agent_url}/readyz")
        _wait_serving(collector, f"{api_url}/")
        tokens = {role: _token(collector, notes, role) for role in ("admin", "viewer")}
        # one open anomaly, so that the collector's per-severity gauge has a series to scrape
        asyncio.run(_execute(dsn, "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, start_ts, summary)"
                                  " VALUES ('live', 'thermal_throttle', 'warning', 'GPU-x', $1, now(), 'hot')", NODE))
        rules = rendered.one("PrometheusRule")["spec"]["groups"]
        prometheus = _start_prometheus(prometheus_bin, workdir, _scrape_config(rendered, ports, tokens["viewer"]),
                                       rules)
        yield Stack(rendered, agent, collector, agent_url, api_url, dsn, prometheus, tokens, notes)
    finally:
        if prometheus is not None:
            prometheus.stop()
        for pod in reversed(pods):
            pod.stop()
        broker.kill()


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


def test_the_images_healthchecks_pass_against_the_running_processes(stack: Stack) -> None:
    from tests.test_dockerfile import final_stage, parse

    for dockerfile, pod in (("Dockerfile.agent", stack.agent), ("Dockerfile.collector", stack.collector)):
        (check,) = [i.args for i in final_stage(parse((ROOT / dockerfile).read_text())) if i.keyword == "HEALTHCHECK"]
        argv = json.loads(check.partition("CMD ")[2])
        argv[0] = str(Path(pod.argv[0]).with_name("python"))
        proc = subprocess.run(argv, env=pod.env, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, f"{dockerfile} HEALTHCHECK failed: {proc.stderr}"


def test_the_collector_stores_what_the_agent_sent(stack: Stack) -> None:
    count = wait_until(lambda: asyncio.run(_execute(stack.dsn, "SELECT count(*) FROM gpu_samples WHERE node = $1",
                                                    NODE)) or None,
                       timeout=60, what="samples of the live agent stored", details=stack.collector.log_tail)
    assert count > 0
    # the admin token from NOTES.txt reads them through the API
    import urllib.request

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


def _promql_values(stack: Stack, uid: str) -> dict[str, str | list[str]]:
    values: dict[str, str | list[str]] = {"__rate_interval": "10s", "__interval": "5s", "datasource": "prometheus"}
    for var in variables(uid):
        if var["type"] == "query" and var.get("datasource", {}).get("type") == "prometheus":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"])
            assert m, var["query"]
            match = substitute(m[1], values, sql=False)
            found = stack.prometheus.label_values(m[2], match)
            assert found, f"variable {var['name']} of {uid}: label_values gave nothing"
            values[var["name"]] = ".*" if var.get("includeAll") else found[0]
    return values


@pytest.mark.parametrize("query", PROMQL, ids=[q.id for q in PROMQL])
def test_every_promql_query_returns_data(stack: Stack, query: Query) -> None:
    values = _promql_values(stack, query.dashboard)
    text = query.text
    if text.startswith("label_values("):
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert m
        assert stack.prometheus.label_values(m[2], substitute(m[1], values, sql=False))
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
    stack.prometheus.wait_for("gpuwatch_collector_open_anomalies")
    scraped = set(stack.prometheus.api("/api/v1/label/__name__/values", {}))
    assert used - scraped == set(), f"used but never scraped: {sorted(used - scraped)}"
