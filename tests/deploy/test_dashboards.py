"""The Grafana dashboards: generated from code, consistent, and every SQL query answered.

* Regenerating (``dashboards/generate.py --check``) gives the committed files, in both
  places (``dashboards/`` and the chart's copy).
* Every dashboard has the datasource variables it queries through, and uses only metric
  names and labels that the agent and the collector really serve: read from their
  ``/metrics`` in the live stack (:mod:`tests.deploy.live`, the rendered DaemonSet and
  Deployment as processes), so a renamed metric or a dropped label fails here by name. The
  PrometheusRule likewise.
* Every SQL query (panels, variables, annotations) runs on a real PostgreSQL whose data came
  through the collector's own path: records of a simulated fleet with incidents
  (``tests/support/incidents``), the agent's event derivation, the writer, the detectors and
  alert router, maintenance and the service-usage rollup, and returns rows.

The PromQL queries run against a real Prometheus in ``test_live_deploy.py``. No Grafana
server can run here; its query-time substitutions are reproduced in
:mod:`tests.deploy.dashboards`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import yaml

from telemetry.catalog import CATALOG
from tests.conftest import wait_until
from tests.deploy.dashboards import (
    ROOT,
    Query,
    all_queries,
    dashboards,
    expand_sql_macros,
    grouping_labels,
    label_matchers,
    load,
    metric_names,
    substitute,
    variables,
)
from tests.deploy.databases import fresh_database
from tests.deploy.live import Stack, parse_exposition
from tests.fixtures_pg import PgServer

QUERIES = all_queries()
SQL = [q for q in QUERIES if q.kind == "sql"]
PROMQL = [q for q in QUERIES if q.kind == "promql"]


def test_regenerating_gives_the_committed_files_in_both_places() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "dashboards" / "generate.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    chart_copy = ROOT / "deploy" / "helm" / "gpuwatch" / "dashboards"
    assert sorted(p.name for p in chart_copy.glob("*.json")) == [p.name for p in dashboards()]
    for path in dashboards():
        assert (chart_copy / path.name).read_bytes() == path.read_bytes()


def test_the_issue_s_dashboards_exist_with_datasource_variables() -> None:
    uids = {load(p)["uid"]: load(p) for p in dashboards()}
    assert set(uids) == {"gpuwatch-fleet", "gpuwatch-gpu", "gpuwatch-service-history", "gpuwatch-anomalies",
                         "gpuwatch-health", "gpuwatch-dcgm", "gpuwatch-kernels"}
    for uid, d in uids.items():
        kinds = {q.kind for q in QUERIES if q.dashboard == uid}
        ds_vars = {v["query"] for v in d["templating"]["list"] if v["type"] == "datasource"}
        if "promql" in kinds:
            assert "prometheus" in ds_vars, f"{uid} queries Prometheus without a datasource variable"
        if "sql" in kinds:
            assert "grafana-postgresql-datasource" in ds_vars, f"{uid} queries PostgreSQL without a variable"
        for panel in d["panels"]:
            ds = panel.get("datasource", {}).get("uid")
            assert ds in (None, "${datasource}", "${pg}"), f"{uid}/{panel['title']}: a fixed datasource {ds}"
    # annotations on time series: anomalies and events over the activity
    assert {a["name"] for a in uids["gpuwatch-anomalies"]["annotations"]["list"]} == {"Anomalies", "GPU events"}


@dataclass(frozen=True)
class Emitted:
    """What the live stack's agent and collector serve on /metrics, and what Prometheus adds."""

    metrics: dict[str, frozenset[str]]  # metric name (as scraped) -> its label names
    added: frozenset[str]  # labels every scraped series gets (instance, job, the target labels)

    def unknown(self, names: set[str]) -> set[str]:
        return names - set(self.metrics) - {"up"}

    def labels_of(self, names: set[str]) -> set[str]:
        return {label for n in names for label in self.metrics.get(n, ())} | set(self.added)


@pytest.fixture(scope="module")
def emitted(stack: Stack) -> Emitted:
    """Read once data flows end to end (records stored, lag measured from the end offsets): the
    partition-labelled gauges have samples only from then on."""

    def read() -> Emitted | None:
        agent, collector = parse_exposition(stack.metrics("agent")), parse_exposition(stack.metrics("collector"))
        flowing = collector.labels.get("gpuwatch_collector_consumer_lag_messages") and \
            "gpuwatch_process_used_memory_bytes" in agent.labels
        if not flowing:
            return None
        # the inference rows come only from a pod that asks to be scraped, which the live stack has
        # not; the exporter gives them the GPU's labels, as every catalog row (tests/test_inference_scraper.py)
        scraped = {m.key: agent.labels["DCGM_FI_DEV_GPU_TEMP"] for m in CATALOG if m.cost == "scrape"}
        return Emitted({**agent.labels, **scraped, **collector.labels}, frozenset(stack.target_labels()))

    return wait_until(read, timeout=60, interval=0.5, what="telemetry flowing from the agent through the collector")


def _query_parts(text: str) -> tuple[str, set[str]]:
    """The expression of a query (a label_values variable's match) and the labels it uses."""
    labels: set[str] = set()
    if text.startswith("label_values("):
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert m, text
        text = m[1]
        labels.add(m[2])
    return text, labels | grouping_labels(text) | label_matchers(text)


@pytest.mark.parametrize("query", PROMQL, ids=[q.id for q in PROMQL])
def test_promql_uses_only_emitted_metrics_and_labels(emitted: Emitted, query: Query) -> None:
    text, labels = _query_parts(query.text)
    names = metric_names(text)
    assert names, f"no metric in {text}"
    unknown = emitted.unknown(names)
    assert not unknown, f"{query.id}: {sorted(unknown)} are not emitted by the agent or the collector"
    missing = labels - emitted.labels_of(names)
    assert not missing, f"{query.id}: labels {sorted(missing)} are on none of {sorted(names)}"


def test_the_prometheus_rule_uses_only_emitted_metrics(emitted: Emitted) -> None:
    from tests.deploy.helm import Chart, value_set

    groups = Chart().render(value_set("defaults")).one("PrometheusRule")["spec"]["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        names = metric_names(rule["expr"])
        unknown = emitted.unknown(names)
        assert not unknown, f"{rule['alert']}: {sorted(unknown)} are not emitted"
        have = emitted.labels_of(names)
        labels = grouping_labels(rule["expr"]) | label_matchers(rule["expr"])
        assert labels <= have, f"{rule['alert']}: {sorted(labels - have)} in {rule['expr']}"
        for text in rule["annotations"].values():
            used = set(re.findall(r"\$labels\.(\w+)", text))
            assert used <= have, f"{rule['alert']}: {sorted(used - have)} in its annotations"


# ---- SQL against the real schema, filled by the collector's path ---------------------------

END = datetime.now(UTC).replace(microsecond=0)
HOURS = 0.5
#: the chart's default detector settings (the general detector's metrics), one catch-all rule
DETECTORS = yaml.safe_load((ROOT / "collector" / "alerting" / "default_rules.yaml").read_text())["detectors"]
RULES = f"""
detectors: {json.dumps(DETECTORS)}
channels:
  am: {{type: alertmanager, url: "http://127.0.0.1:9"}}
rules:
  - {{name: everything, channels: [am]}}
"""
REIMAGED = "gpu-node-reimaged"  # reports a GPU UUID of another node for two minutes: a gpu_uuid_conflict


async def _fill(dsn: str) -> None:
    """The collector's own path, in process as ``gpuwatch up`` runs it: each node's agent side
    (event derivation, XID events, the framer) -> the in-process transport -> the ingestor
    (decode, validate, store; dead letters into the database, as when the dead-letter topic
    refuses them) -> detection and alerting; then maintenance and the service-usage rollup."""
    from agent.framing import Framer
    from agent.transitions import GpuTransitions
    from collector import deadletter
    from collector.alerting.rules import parse_rules
    from collector.alerting.service import DetectionService
    from collector.ingest import Inbound, Ingestor
    from collector.store import Store, usage, validate, validate_event
    from collector.store.kernels import KernelStore
    from gpuwatch.inprocess import InProcessTransport
    from telemetry.records import EventRecord
    from telemetry.wire import Message
    from tests.support.incidents.generate import Fleet

    start = END - timedelta(hours=HOURS)
    fleet = Fleet(nodes=2, hours=HOURS, seed=11, t0=start.timestamp())
    store = await Store.open(dsn, now=END)
    transport = InProcessTransport(asyncio.get_running_loop())
    framers: dict[str, Framer] = {}

    def framer(node: str) -> Framer:
        if node not in framers:
            framers[node] = Framer(transport.submit, node=node, instance=f"agent-of-{node}", max_delay_s=3600)
        return framers[node]

    async def dead_letter(msg: Inbound, reason: str) -> None:
        await deadletter.record(store.pool, "gpu.telemetry", msg.partition, msg.offset, msg.key, msg.value,
                                msg.headers, reason, "the dead-letter topic refused it")

    try:
        detection = DetectionService(store.pool, parse_rules(RULES))
        ingestor = Ingestor(store, dead_letter, validate=validate, validate_event=validate_event,
                            on_committed=detection.on_committed, kernels=KernelStore(store.pool))

        async def deliver() -> None:
            await asyncio.sleep(0)  # the transport's submit runs on the loop
            while transport.pending():
                await ingestor.handle(await transport.batch(5000, 0))
            await detection.flush()

        transitions: dict[str, GpuTransitions] = {}
        last_xid: dict[str, float] = {}
        copied = None  # (gpu, until): what the re-imaged node reports
        for n, record in enumerate(fleet.records()):
            if isinstance(record, EventRecord):  # the agent's own events (a GPU lost, back)
                framer(record.node).add_event(record)
                continue
            t = transitions.setdefault(record.gpu, GpuTransitions(record.node, record.gpu))
            for event in t.update(record.ts, record.metrics):
                framer(record.node).add_event(event)
            xid = record.metrics.get("DCGM_FI_DEV_XID_ERRORS", 0)
            if xid and xid != last_xid.get(record.gpu):  # what the agent's XID event thread reports
                framer(record.node).add_event(
                    EventRecord(record.ts, record.node, record.gpu, "xid", int(xid), f"XID {int(xid)}"))
            last_xid[record.gpu] = xid
            framer(record.node).add(record)
            if copied is None and record.ts >= start.timestamp() + HOURS * 1800:
                copied = (record.gpu, record.ts + 120)
            if copied is not None and record.gpu == copied[0] and record.ts <= copied[1]:
                framer(REIMAGED).add(dataclasses.replace(record, node=REIMAGED))
            if n % 5000 == 0:
                await deliver()
        transport.submit(Message(b"GPU-x", b"not a frame", framer(REIMAGED).frame_headers))
        for message in _kernel_messages(start.timestamp()):  # as the agents' probe receivers send them
            transport.submit(message)
        for f in framers.values():
            f.flush()
        await deliver()
        assert ingestor.counters["gpu_uuid_conflicts"] and ingestor.counters["dead_lettered"], ingestor.counters
        assert ingestor.counters["kernel_windows"] and not ingestor.counters["bad_kernels"], ingestor.counters
        await store.maintain(END + timedelta(minutes=2))
        async with store.pool.acquire() as conn:
            await usage.rebuild(conn, start - timedelta(minutes=2), END + timedelta(minutes=2))
    finally:
        await store.close()


def _kernel_messages(start: float) -> Iterator[Any]:
    """CUPTI probe windows of two services (two pods of one) every 10 s of the range, and one window the
    agent could not attribute, as ``kernels`` messages with the identity the agent gives them."""
    from telemetry.kernels import KernelStat
    from telemetry.wire import Message, MessageType, stream_headers
    from tests.support.kernel_windows import training

    pods = (("node-a", "GPU-k1", "research", "trainer-0", "llm", 101), ("node-a", "GPU-k2", "research", "trainer-1",
            "llm", 102), ("node-b", "GPU-k3", "inference", "serve-0", "chat", 201))
    for i, ts in enumerate(range(int(start), int(start + HOURS * 3600), 10)):
        for node, gpu, namespace, pod, service, pid in pods:
            window = training(float(ts), pid=pid, node=node, gpu=gpu, namespace=namespace, pod=pod, service=service,
                              scale=1 + i % 3)
            yield Message(gpu.encode(), window.encode(), stream_headers(MessageType.KERNELS, node, "agent-of-" + node))
    orphan = dataclasses.replace(training(start + 60, pid=999, node="node-b"), gpu="", namespace="", pod="",
                                 container="", service="", kernels=(KernelStat("custom_kernel", 5, 50_000, 12_000),))
    yield Message(b"node-b", orphan.encode(), stream_headers(MessageType.KERNELS, "node-b", "agent-of-node-b"))


@pytest.fixture(scope="module")
def filled_db(pg_server: PgServer) -> Iterator[str]:
    with fresh_database(pg_server, "dashboards") as dsn:
        asyncio.run(_fill(dsn))
        yield dsn


async def _fetch(dsn: str, sql: str) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def _sql_values(dsn: str, uid: str) -> dict[str, str | list[str]]:
    """Each variable's values as Grafana would fetch them (SQL variables from their own queries)."""
    values: dict[str, str | list[str]] = {"__interval": "1m", "__interval_ms": "60000"}
    if uid == "gpuwatch-gpu":  # a Prometheus variable there; the node names are the same in both stores
        nodes = [r[0] for r in asyncio.run(_fetch(dsn, "SELECT DISTINCT node FROM gpu_inventory"))]
        values["Hostname"] = nodes[0]
    for var in variables(uid):
        if var["type"] == "query" and "postgres" in var.get("datasource", {}).get("type", ""):
            sql = expand_sql_macros(substitute(var["query"], values, sql=True), END - timedelta(hours=2), END)
            found = [str(r[0]) for r in asyncio.run(_fetch(dsn, sql))]
            assert found, f"variable {var['name']} of {uid} has no values: {sql}"
            values[var["name"]] = found
        elif var["type"] == "custom":
            values[var["name"]] = [v.strip() for v in var["query"].split(",")]
        elif var["type"] == "textbox":
            values[var["name"]] = var["query"]
    return values


@pytest.mark.parametrize("query", SQL, ids=[q.id for q in SQL])
def test_every_sql_query_returns_data(filled_db: str, query: Query) -> None:
    values = _sql_values(filled_db, query.dashboard)
    sql = expand_sql_macros(substitute(query.text, values, sql=True), END - timedelta(hours=2),
                            END + timedelta(minutes=5))
    try:
        rows = asyncio.run(_fetch(filled_db, sql))
    except asyncpg.PostgresError as exc:
        pytest.fail(f"{query.id}: {exc}\n{sql}")
    assert rows, f"{query.id} returned no rows:\n{sql}"
    if query.fmt == "time_series":
        assert {"time", "metric", "value"} <= set(rows[0].keys()), rows[0].keys()
        assert any(r["value"] is not None for r in rows), f"{query.id}: only NULL values"
    elif query.fmt == "annotation":
        assert {"time", "text", "tags"} <= set(rows[0].keys())
    elif query.fmt == "table" and "value" in rows[0]:
        assert rows[0]["value"] is not None, f"{query.id}: NULL"
        if query.dashboard == "gpuwatch-service-history":  # totals of a fleet that ran an hour
            assert float(rows[0]["value"]) > 0, f"{query.id}: {rows[0]['value']}"


def test_every_stored_anomaly_and_event_kind_is_shown_by_kind_without_naming_one(filled_db: str) -> None:
    """The by-kind panels show whatever the detectors and the collector store (launch_bound, an info
    anomaly; gpu_uuid_conflict, the collector's own event), and no query names a kind."""
    range_ = (END - timedelta(hours=2), END + timedelta(minutes=5))
    for title, table in (("Anomalies by kind", "anomalies"), ("Events by kind", "events")):
        (query,) = [q for q in SQL if q.dashboard == "gpuwatch-anomalies" and q.where.startswith(title + "/")]
        sql = expand_sql_macros(substitute(query.text, _sql_values(filled_db, query.dashboard), sql=True), *range_)
        shown = {r["metric"] for r in asyncio.run(_fetch(filled_db, sql))}
        stored = {r[0] for r in asyncio.run(_fetch(filled_db, f"SELECT DISTINCT kind FROM {table}"))}
        assert shown == stored, f"{title}: {sorted(stored - shown)} stored but not shown"
        assert {"launch_bound", "gpu_uuid_conflict"} & stored, stored
    severities = {r[0] for r in asyncio.run(_fetch(filled_db, "SELECT DISTINCT severity FROM anomalies"))}
    (severity,) = [v for v in variables("gpuwatch-anomalies") if v["name"] == "severity"]
    assert "info" in severities and severities <= {v.strip() for v in severity["query"].split(",")}
    for q in QUERIES:
        assert not re.search(r"\bkind\s*(=|<>|!=|IN\b|~)", q.text, re.IGNORECASE), f"{q.id} singles out a kind"


def test_the_kernel_flame_graph_is_a_nested_set_in_depth_first_order(filled_db: str) -> None:
    """What Grafana's flame graph panel needs: one root, each node right before its children, a
    node's value the sum of its children's, leaves' self their value; levels total, service, pod,
    category, kernel; the unattributed window under its own service."""
    (query,) = [q for q in SQL if q.dashboard == "gpuwatch-kernels" and q.where.startswith("Kernel time:")]
    sql = expand_sql_macros(substitute(query.text, _sql_values(filled_db, query.dashboard), sql=True),
                            END - timedelta(hours=2), END + timedelta(minutes=5))
    rows = [(r["level"], r["value"], r["self"], r["label"]) for r in asyncio.run(_fetch(filled_db, sql))]
    assert rows[0][0] == 0 and rows[0][3] == "total" and [r[0] for r in rows].count(0) == 1
    children: dict[int, list[int]] = {}
    parents: list[int] = []  # the open node of each level
    for i, (level, value, own, _label) in enumerate(rows):
        assert level <= (rows[i - 1][0] + 1 if i else 0), f"row {i} skips a level: {rows[i - 1:i + 1]}"
        del parents[level:]
        if parents:
            children.setdefault(parents[-1], []).append(i)
        parents.append(i)
        assert value > 0 and own == (value if level == 4 else 0), rows[i]
    for parent, kids in children.items():
        assert abs(rows[parent][1] - sum(rows[k][1] for k in kids)) < 1e-6 * rows[parent][1], rows[parent]
        labels = [rows[k][3] for k in kids]
        assert len(set(labels)) == len(labels), labels
    assert {r[3] for r in rows if r[0] == 1} == {"chat", "llm", "(unattributed)"}
    assert {r[3] for r in rows if r[0] == 2} >= {"research/trainer-0", "research/trainer-1", "inference/serve-0",
                                                 "(no pod)"}
    assert {r[3] for r in rows if r[0] == 3} >= {"gemm", "attention", "elementwise"}
