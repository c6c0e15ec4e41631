"""The chart's workloads started from the rendered manifests, against real backends, on loopback.

What a cluster would run: the agent container of the rendered DaemonSet (its command, env
and mounts, with ``--simulate 4``) sends frames to a real Kafka-protocol broker (tansu)
with the four topics the chart documents; the collector container of the rendered
Deployment consumes them into a real PostgreSQL; the first tokens are made with the
commands NOTES.txt prints; a real Prometheus scrapes both as the rendered ServiceMonitors
say (honorLabels, path, the bearer token, the target labels prometheus-operator adds) and
loads the rendered PrometheusRule.

:func:`start_stack` returns only once Prometheus has scraped every target successfully,
and :func:`exposed` reads what both processes really serve on ``/metrics``: the metric
and label names the dashboards and rules may use (``tests/deploy/test_dashboards.py``).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import PrometheusServer, free_port, http_get, wait_until
from tests.deploy.helm import Chart, Rendered, value_set
from tests.deploy.pods import LocalPod, materialize
from tests.fixtures_kafka import KafkaBroker, create_topic

NAMESPACE = "gpuwatch"
NODE = "gpu-node-live"
AGENT_POD = "gpuwatch-agent-x7k2p"
COLLECTOR_POD = "gpuwatch-collector-5d9f8-abcde"
#: The topics docs/deploy.md tells users to create (name, partitions).
TOPICS = (("gpu.telemetry", 3), ("gpu.telemetry.dlq", 1), ("gpu.telemetry.control", 1), ("gpu.telemetry.peers", 1))
#: Labels Prometheus adds to every series it scrapes.
PROMETHEUS_LABELS = frozenset({"instance", "job"})


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
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self, component: str) -> str:
        """The raw ``/metrics`` text of ``agent`` or ``collector`` (with the viewer token, as Prometheus)."""
        url = self.agent_url if component == "agent" else self.api_url
        req = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {self.tokens['viewer']}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            text: str = resp.read().decode()
        return text

    def target_labels(self) -> set[str]:
        """Labels the scrape configs (the ServiceMonitors, as the operator renders them) add."""
        return {k for job in self.jobs for sc in job["static_configs"] for k in sc["labels"]} | PROMETHEUS_LABELS


@dataclass(frozen=True)
class Exposed:
    """Metric names (as PromQL sees them: counters with ``_total``) and label names of each."""

    labels: dict[str, frozenset[str]]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.labels)


def parse_exposition(text: str) -> Exposed:
    """Every sample name of a ``/metrics`` text with its label names, as written (dcgm-exporter's
    counters have no ``_total``); a family without samples still gives its name (its TYPE line)."""
    from tests.test_exporter_prometheus import Exposed as Text

    parsed = Text.parse(text)
    labels: dict[str, set[str]] = {name: set() for name in parsed.types}
    for sample in parsed.samples:
        labels.setdefault(sample.name, set()).update(sample.labels)
    return Exposed({k: frozenset(v) for k, v in labels.items()})


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


def scrape_jobs(rendered: Rendered, ports: dict[str, int], token: str) -> list[dict[str, Any]]:
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
        wait_until(lambda: process.poll() is None and ok(f"{server.url}/-/ready"), timeout=30,
                   what="Prometheus ready", details=server.log_tail)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_scraped(prometheus: PrometheusServer, jobs: list[dict[str, Any]]) -> None:
    """Until every job's target was scraped and answered (``up == 1``): before that, a query or a
    ``label_values`` finds nothing, whichever test happens to run first."""
    names = sorted(j["job_name"] for j in jobs)
    prometheus.wait_for(
        "up == 1", lambda found: sorted(r["metric"]["job"] for r in found) == names, timeout=30)


def ok(url: str) -> bool:
    try:
        return http_get(url, timeout=2).status == 200
    except OSError:
        return False


def _wait_serving(pod: LocalPod, url: str) -> None:
    def probe() -> bool:
        if not pod.running():
            pytest.fail(f"{pod.argv[1]} exited:\n{pod.log_tail()}", pytrace=False)
        return ok(url)

    wait_until(probe, timeout=60, what=url, details=pod.log_tail)


async def execute(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


def start_stack(dsn: str, tansu_bin: Path, prometheus_bin: str, workdir: Path) -> Iterator[Stack]:
    """Yield a running :class:`Stack`; everything is stopped afterwards (also on failure)."""
    broker = KafkaBroker(tansu_bin, free_port(), workdir, "memory://tansu/").start()
    pods: list[LocalPod] = []
    prometheus: PrometheusServer | None = None
    try:
        for topic, partitions in TOPICS:
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
        _wait_serving(collector, f"{api_url}/healthz")
        tokens = {role: _token(collector, notes, role) for role in ("admin", "viewer")}
        # one open anomaly, so that the collector's per-severity gauge has a series to scrape
        asyncio.run(execute(dsn, "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, start_ts, summary)"
                                 " VALUES ('live', 'thermal_throttle', 'warning', 'GPU-x', $1, now(), 'hot')", NODE))
        rules = rendered.one("PrometheusRule")["spec"]["groups"]
        jobs = scrape_jobs(rendered, ports, tokens["viewer"])
        prometheus = _start_prometheus(prometheus_bin, workdir, jobs, rules)
        _wait_scraped(prometheus, jobs)
        yield Stack(rendered, agent, collector, agent_url, api_url, dsn, prometheus, tokens, notes, jobs)
    finally:
        if prometheus is not None:
            prometheus.stop()
        for pod in reversed(pods):
            pod.stop()
        broker.kill()
