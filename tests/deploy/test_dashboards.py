"""The Grafana dashboards: generated from code, consistent, and every SQL query answered.

* Regenerating (``dashboards/generate.py --check``) gives the committed files, in both
  places (``dashboards/`` and the chart's copy).
* Every dashboard has the datasource variables it queries through, and uses only metric
  names the agent and the collector emit (from their sources and the catalog) and labels
  they emit.
* Every SQL query (panels, variables, annotations) runs on a real PostgreSQL whose data came
  through the collector's own path: records of a simulated fleet with incidents
  (``benchmarks/incidents``), the agent's event derivation, the writer, the detectors and
  alert router, maintenance and the service-usage rollup, and returns rows.

The PromQL queries run against a real Prometheus in ``test_live_deploy.py``. No Grafana
server can run here; its query-time substitutions are reproduced in
:mod:`tests.deploy.dashboards`.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

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
                         "gpuwatch-health", "gpuwatch-dcgm"}
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


def _emitted_names() -> set[str]:
    """Metric names the agent and the collector expose, read from their sources."""
    from telemetry.catalog import KEYS

    names = set(KEYS) | {"up"}
    # prometheus_client's ProcessCollector
    names |= {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
              "process_start_time_seconds", "process_open_fds", "process_max_fds"}
    for source in (ROOT / "agent" / "exposition.py", ROOT / "collector" / "api" / "metrics.py"):
        text = source.read_text()
        names |= {m + "_total" for m in re.findall(r'CounterMetricFamily\(\s*"([a-z_]+)"', text)}
        names |= set(re.findall(r'GaugeMetricFamily\(\s*"([a-z_]+)"', text))
        names |= {n + ("_total" if k == "counter" else "") for n, k in
                  re.findall(r'\("(gpuwatch_agent_[a-z_]+)", "(counter|gauge)"', text)}
        names |= {m + "_total" for m in re.findall(r'\("[a-z_]+", "(gpuwatch_collector_[a-z_]+)", "', text)}
        names |= set(re.findall(r'\("(gpuwatch_process_[a-z_]+)", "', text))
    return names


_EMITTED_LABELS = {
    # dcgm-exporter's GPU labels (agent/exposition.py gpu_labels) and the process families'
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "GPU_I_PROFILE",
    "GPU_I_ID", "container", "namespace", "pod", "pid", "process_name", "service",
    # the agent's and collector's own
    "call", "kind", "driver", "driver_version", "partition", "severity",
    # added by Prometheus
    "instance", "job",
}


@pytest.mark.parametrize("query", PROMQL, ids=[q.id for q in PROMQL])
def test_promql_uses_only_emitted_metrics_and_labels(query: Query) -> None:
    text = query.text
    if text.startswith("label_values("):
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert m, text
        text, label = m[1], m[2]
        assert label in _EMITTED_LABELS
    names = metric_names(text)
    assert names, f"no metric in {text}"
    unknown = names - _emitted_names()
    assert not unknown, f"{query.id}: {sorted(unknown)} are not emitted by the agent or the collector"
    labels = grouping_labels(text) | label_matchers(text)
    assert labels <= _EMITTED_LABELS, f"{query.id}: labels {sorted(labels - _EMITTED_LABELS)} are never emitted"


def test_the_prometheus_rule_uses_only_emitted_metrics() -> None:
    from tests.deploy.helm import Chart, value_set

    groups = Chart().render(value_set("defaults")).one("PrometheusRule")["spec"]["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        unknown = metric_names(rule["expr"]) - _emitted_names()
        assert not unknown, f"{rule['alert']}: {sorted(unknown)} are not emitted"
        labels = grouping_labels(rule["expr"]) | label_matchers(rule["expr"])
        assert labels <= _EMITTED_LABELS, rule["expr"]
        for text in rule["annotations"].values():
            used = set(re.findall(r"\$labels\.(\w+)", text))
            assert used <= _EMITTED_LABELS, f"{rule['alert']}: {used - _EMITTED_LABELS}"


# ---- SQL against the real schema, filled by the collector's path ---------------------------

END = datetime.now(UTC).replace(microsecond=0)
HOURS = 1.0
RULES = """
channels:
  am: {type: alertmanager, url: "http://127.0.0.1:9"}
rules:
  - {name: everything, channels: [am]}
"""


async def _fill(dsn: str) -> None:
    from agent.transitions import GpuTransitions
    from benchmarks.incidents.generate import Fleet
    from collector.alerting.rules import parse_rules
    from collector.alerting.service import DetectionService
    from collector.api import usage
    from collector.store import Store
    from telemetry.records import EventRecord, GpuRecord

    start = END - timedelta(hours=HOURS)
    fleet = Fleet(nodes=1, hours=HOURS, seed=3, t0=start.timestamp())
    store = await Store.open(dsn, now=END)
    try:
        detection = DetectionService(store.pool, parse_rules(RULES))
        transitions: dict[str, GpuTransitions] = {}
        last_xid: dict[str, float] = {}
        batch: list[GpuRecord] = []
        events: list[EventRecord] = []
        for record in fleet.records():
            t = transitions.setdefault(record.gpu, GpuTransitions(record.node, record.gpu))
            events += t.update(record.ts, record.metrics)
            xid = record.metrics.get("DCGM_FI_DEV_XID_ERRORS", 0)
            if xid and xid != last_xid.get(record.gpu):  # what the agent's XID event thread reports
                events.append(EventRecord(record.ts, record.node, record.gpu, "xid", int(xid), f"XID {int(xid)}"))
            last_xid[record.gpu] = xid
            batch.append(record)
            if len(batch) >= 5000:
                await store.write(batch, events)
                detection.on_committed(batch, events)
                await detection.flush()
                batch, events = [], []
        await store.write(batch, events)
        detection.on_committed(batch, events)
        await detection.flush()
        await store.maintain(END + timedelta(minutes=2))
        async with store.pool.acquire() as conn:
            await usage.rebuild(conn, start - timedelta(minutes=2), END + timedelta(minutes=2))
    finally:
        await store.close()


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
