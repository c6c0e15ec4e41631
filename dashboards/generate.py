"""Generate gpuwatch's Grafana dashboards with grafana-foundation-sdk (Grafana's typed builders).

Why code, not hand-written JSON: six dashboards of dozens of panels share datasource
variables, filters, units and layouts; builders keep them consistent and reviewable, and
``python dashboards/generate.py --check`` (run by the tests) fails when the committed JSON
differs from what this file generates. The JSON is written twice, to ``dashboards/`` (for
users who import it by hand) and to ``deploy/helm/gpuwatch/dashboards/`` (helm can only read
files inside the chart; the chart turns each into a ConfigMap labelled
``grafana_dashboard: "1"``).

Metric names and labels are the agent's (``telemetry/catalog.py``, ``agent/exposition.py``)
and the collector's (``collector/api/metrics.py``); SQL reads the collector's schema
(``collector/migrations/``). ``tests/deploy/test_dashboards.py`` checks both, and runs every
query against a real Prometheus and a real PostgreSQL.

Usage: ``python dashboards/generate.py`` (write) or ``--check`` (compare, exit 1 on a difference).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from grafana_foundation_sdk.builders.common import ReduceDataOptions
from grafana_foundation_sdk.builders.dashboard import (
    AnnotationQuery,
    CustomVariable,
    Dashboard,
    DashboardLink,
    DatasourceVariable,
    Panel,
    QueryVariable,
    Row,
    TextBoxVariable,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery as PromQuery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.table import Panel as Table
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DashboardLinkType, DataSourceRef, VariableOption, VariableRefresh

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = (ROOT / "dashboards", ROOT / "deploy" / "helm" / "gpuwatch" / "dashboards")

PROM = DataSourceRef(type_val="prometheus", uid="${datasource}")
PG = DataSourceRef(type_val="grafana-postgresql-datasource", uid="${pg}")
TAGS = ["gpuwatch"]


# ---- a PostgreSQL query (the SDK has no builder for the SQL data sources) ----------------


class SqlQuery(cogvariants.Dataquery):
    """A Grafana PostgreSQL target in code mode: raw SQL with Grafana's macros."""

    def __init__(self, sql: str, fmt: str) -> None:
        self.sql = sql
        self.fmt = fmt
        self.ref_id: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"datasource": PG.to_json(), "editorMode": "code", "format": self.fmt,
                                  "rawQuery": True, "rawSql": self.sql}
        if self.ref_id is not None:
            out["refId"] = self.ref_id
        return out


class Sql(cogbuilder.Builder[SqlQuery]):
    def __init__(self, sql: str, fmt: str = "time_series") -> None:
        self._internal = SqlQuery(" ".join(sql.split()), fmt)

    def ref_id(self, ref_id: str) -> Self:
        self._internal.ref_id = ref_id
        return self

    def build(self) -> SqlQuery:
        return self._internal


# ---- small helpers -----------------------------------------------------------------------


def prom(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> PromQuery:
    q = PromQuery().expr(expr).ref_id(ref).datasource(PROM)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format("table")  # type: ignore[arg-type]
    return q


def ts(title: str, unit: str, *targets: cogbuilder.Builder[Any], span: int = 12, height: int = 8,
       description: str = "", min_interval: str = "") -> Timeseries:
    panel = Timeseries().title(title).unit(unit).span(span).height(height).datasource(
        _ds_of(targets))
    for i, t in enumerate(targets):
        panel = panel.with_target(_with_ref(t, i))
    if description:
        panel = panel.description(description)
    if min_interval:
        panel = panel.interval(min_interval)
    return panel


def stat(title: str, unit: str, target: cogbuilder.Builder[Any], *, span: int = 4, description: str = "",
         decimals: float | None = None) -> Stat:
    panel = (Stat().title(title).unit(unit).span(span).height(4).datasource(_ds_of([target]))
             .with_target(_with_ref(target, 0))
             .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if description:
        panel = panel.description(description)
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def table(title: str, *targets: cogbuilder.Builder[Any], span: int = 24, height: int = 9,
          description: str = "") -> Table:
    panel = Table().title(title).span(span).height(height).datasource(_ds_of(targets))
    for i, t in enumerate(targets):
        panel = panel.with_target(_with_ref(t, i))
    if description:
        panel = panel.description(description)
    return panel


def _with_ref(target: cogbuilder.Builder[Any], i: int) -> cogbuilder.Builder[Any]:
    ref = chr(ord("A") + i)
    return target.ref_id(ref) if hasattr(target, "ref_id") else target


def _ds_of(targets: Sequence[cogbuilder.Builder[Any]]) -> DataSourceRef:
    return PG if all(isinstance(t, Sql) for t in targets) else PROM


def prom_datasource() -> DatasourceVariable:
    return DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def pg_datasource() -> DatasourceVariable:
    return DatasourceVariable("pg").label("PostgreSQL / TimescaleDB").type("grafana-postgresql-datasource")


def prom_label(name: str, query: str, label: str, *, multi: bool = True) -> QueryVariable:
    var = (QueryVariable(name).label(label).datasource(PROM).query(query)
           .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(1))  # type: ignore[arg-type]
    if multi:
        var = var.multi(True).include_all(True).all_value(".*").current(
            VariableOption(selected=True, text="All", value="$__all"))
    return var


def sql_variable(name: str, sql: str, label: str) -> QueryVariable:
    return (QueryVariable(name).label(label).datasource(PG).query(" ".join(sql.split()))
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).multi(True).include_all(True)
            .current(VariableOption(selected=True, text="All", value="$__all")))


def base(uid: str, title: str, description: str) -> Dashboard:
    return (Dashboard(title).uid(uid).description(description).tags(TAGS).editable().refresh("30s")
            .time("now-6h", "now").timezone("browser")
            .link(DashboardLink("gpuwatch").type(DashboardLinkType.DASHBOARDS).tags(TAGS).as_dropdown(True)
                  .include_vars(True).keep_time(True)))


# ---- the dashboards -----------------------------------------------------------------------

NODE = 'Hostname=~"$Hostname"'


def fleet() -> Dashboard:
    f = NODE
    return (
        base("gpuwatch-fleet", "gpuwatch / Fleet overview",
             "Every GPU node at a glance: how many GPUs, how busy, how hot, what they draw, who holds them.")
        .with_variable(prom_datasource())
        .with_variable(prom_label("Hostname", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)", "Node"))
        .with_row(Row("Now"))
        .with_panel(stat("GPUs", "none", prom(f"count(count by (UUID) (DCGM_FI_DEV_GPU_TEMP{{{f}}}))"), span=3))
        .with_panel(stat("Nodes", "none", prom(f"count(count by (Hostname) (DCGM_FI_DEV_GPU_TEMP{{{f}}}))"),
                         span=3))
        .with_panel(stat("GPUs lost", "none", prom(
            "sum((1 - gpuwatch_agent_gpu_up) * on (instance) group_left (Hostname) "
            f"gpuwatch_agent_info{{{f}}}) or vector(0)"), span=3,
            description="GPUs that stopped answering NVML (gpuwatch_agent_gpu_up == 0)."))
        .with_panel(stat("Average SM active", "percentunit",
                         prom(f"avg(max by (UUID) (DCGM_FI_PROF_SM_ACTIVE{{{f}}}))"), span=3))
        .with_panel(stat("Power", "watt", prom(f"sum(max by (UUID) (DCGM_FI_DEV_POWER_USAGE{{{f}}}))"), span=3))
        .with_panel(stat("Framebuffer used", "decmbytes",
                         prom(f"sum(max by (UUID) (DCGM_FI_DEV_FB_USED{{{f}}}))"), span=3))
        .with_panel(stat("Throttled GPUs", "none", prom(
            f"count(max by (UUID) (floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{f}}} / 4) % 64) > 0) or vector(0)"),
            span=3, description="GPUs with a slowdown clock event reason (power cap, HW slowdown, sync boost, "
                                "thermal, power brake)."))
        .with_panel(stat("Open anomalies", "none", prom("sum(max by (severity) (gpuwatch_collector_open_anomalies)) "
                                                        "or vector(0)"), span=3,
                         description="Anomalies the collector's detectors found that are still open."))
        .with_row(Row("Activity by node"))
        .with_panel(ts("SM active", "percentunit", prom(f"avg by (Hostname) (DCGM_FI_PROF_SM_ACTIVE{{{f}}})",
                                                        "{{Hostname}}"),
                       description="Average over the node's GPUs of the share of cycles an SM had a warp."))
        .with_panel(ts("Tensor pipe active", "percentunit",
                       prom(f"avg by (Hostname) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{f}}})", "{{Hostname}}")))
        .with_panel(ts("GPU utilization", "percent", prom(f"avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{{{f}}})",
                                                          "{{Hostname}}")))
        .with_panel(ts("Power", "watt", prom(
            f"sum by (Hostname) (max by (Hostname, UUID) (DCGM_FI_DEV_POWER_USAGE{{{f}}}))", "{{Hostname}}")))
        .with_panel(ts("Framebuffer used", "decmbytes", prom(
            f"sum by (Hostname) (max by (Hostname, UUID) (DCGM_FI_DEV_FB_USED{{{f}}}))", "{{Hostname}}")))
        .with_panel(ts("Hottest GPU", "celsius", prom(f"max by (Hostname) (DCGM_FI_DEV_GPU_TEMP{{{f}}})",
                                                      "{{Hostname}}")))
        .with_row(Row("Who holds the GPUs"))
        .with_panel(ts("GPUs per service", "none", prom(
            "max by (namespace, service) (gpuwatch_service_gpus)", "{{namespace}}/{{service}}"),
            description="From the collector's database: GPUs each service's pods hold now."))
        .with_panel(ts("SM active per service", "percentunit", prom(
            "max by (namespace, service) (gpuwatch_service_sm_active)", "{{namespace}}/{{service}}")))
        .with_panel(ts("GPU memory per pod", "bytes", prom(
            f"sum by (namespace, pod) (gpuwatch_process_used_memory_bytes{{{f}}})", "{{namespace}}/{{pod}}")))
        .with_panel(ts("SM utilization per pod", "percent", prom(
            f"avg by (namespace, pod) (gpuwatch_process_sm_util{{{f}}})", "{{namespace}}/{{pod}}")))
        .with_row(Row("GPUs"))
        .with_panel(table(
            "GPUs now",
            prom(f"max by (Hostname, gpu, UUID, modelName, namespace, pod) (DCGM_FI_PROF_SM_ACTIVE{{{f}}})",
                 instant=True),
            prom(f"max by (Hostname, gpu, UUID, modelName, namespace, pod) (DCGM_FI_DEV_GPU_TEMP{{{f}}})",
                 instant=True),
            prom(f"max by (Hostname, gpu, UUID, modelName, namespace, pod) (DCGM_FI_DEV_POWER_USAGE{{{f}}})",
                 instant=True),
            description="One row per GPU and holding pod: SM active (A), temperature (B), power (C)."))
    )


def gpu_detail() -> Dashboard:
    f = 'Hostname=~"$Hostname", UUID=~"$gpu"'
    r = f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{f}}}"

    def g(title: str, unit: str, *series: tuple[str, str], description: str = "") -> Timeseries:
        """A panel of per-GPU series: (a metric name, or an expression with {METRIC} selectors; legend prefix)."""
        targets = []
        for expr, prefix in series:
            inner = re.sub(r"\{(\w+)\}", lambda m: f"{m[1]}{{{f}}}", expr) if "{" in expr else f"{expr}{{{f}}}"
            targets.append(prom(f"max by (Hostname, gpu) ({inner})", f"{prefix} {{{{Hostname}}}} {{{{gpu}}}}".strip()))
        return ts(title, unit, *targets, span=8, description=description)

    return (
        base("gpuwatch-gpu", "gpuwatch / Node and GPU detail",
             "Every counter of the chosen GPUs, their processes, and the events and anomalies on them.")
        .with_variable(prom_datasource())
        .with_variable(pg_datasource())
        .with_variable(prom_label("Hostname", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)", "Node", multi=False))
        .with_variable(prom_label("gpu", 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, UUID)', "GPU"))
        .annotation(AnnotationQuery().name("GPU events").datasource(PG).enable(True).icon_color("orange")
                    .target(Sql("SELECT ts AS time, kind || coalesce(' ' || code::text, '') || ' ' || detail AS text,"
                                " kind AS tags FROM events WHERE node = '$Hostname' AND $__timeFilter(ts)"
                                " ORDER BY ts", "table")))  # type: ignore[arg-type]
        .annotation(AnnotationQuery().name("Anomalies").datasource(PG).enable(True).icon_color("red")
                    .target(Sql("SELECT start_ts AS time, end_ts AS timeend, summary AS text, kind AS tags"
                                " FROM anomalies WHERE node = '$Hostname' AND start_ts <= $__timeTo()"
                                " AND (end_ts IS NULL OR end_ts >= $__timeFrom()) ORDER BY start_ts",
                                "table")))  # type: ignore[arg-type]
        .with_row(Row("Activity"))
        .with_panel(g("GPU utilization", "percent", ("DCGM_FI_DEV_GPU_UTIL", "")))
        .with_panel(g("SM active", "percentunit", ("DCGM_FI_PROF_SM_ACTIVE", "")))
        .with_panel(g("SM occupancy", "percentunit", ("DCGM_FI_PROF_SM_OCCUPANCY", "")))
        .with_panel(g("Tensor / DRAM active", "percentunit", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor"),
                      ("DCGM_FI_PROF_DRAM_ACTIVE", "dram")))
        .with_panel(g("FP64 / FP32 / FP16 pipes", "percentunit", ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "fp64"),
                      ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "fp32"), ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "fp16")))
        .with_panel(g("Graphics engine / copy / video", "percent", ("100 * {DCGM_FI_PROF_GR_ENGINE_ACTIVE}", "gr"),
                      ("DCGM_FI_DEV_MEM_COPY_UTIL", "copy"), ("DCGM_FI_DEV_ENC_UTIL", "enc"),
                      ("DCGM_FI_DEV_DEC_UTIL", "dec")))
        .with_row(Row("Memory, power, heat, clocks"))
        .with_panel(g("Framebuffer", "decmbytes", ("DCGM_FI_DEV_FB_USED", "used"), ("DCGM_FI_DEV_FB_FREE", "free"),
                      ("DCGM_FI_DEV_FB_RESERVED", "reserved")))
        .with_panel(g("Power and limit", "watt", ("DCGM_FI_DEV_POWER_USAGE", "draw"),
                      ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "limit"),
                      ("rate({DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION}[$__rate_interval]) / 1000", "from energy"),
                      description="Energy is a counter in mJ: its rate / 1000 is the average power in W."))
        .with_panel(g("Temperature", "celsius", ("DCGM_FI_DEV_GPU_TEMP", "gpu"), ("DCGM_FI_DEV_MEMORY_TEMP", "memory")))
        .with_panel(g("Clocks", "rotmhz", ("DCGM_FI_DEV_SM_CLOCK", "sm"), ("DCGM_FI_DEV_MEM_CLOCK", "mem")))
        .with_panel(g("Throttling", "bool", (f"floor({r} / 32) % 4 > bool 0", "thermal"),
                      (f"(floor({r} / 4) % 2) + (floor({r} / 8) % 2) + (floor({r} / 128) % 2) > bool 0", "power"),
                      description="Clock event reasons: thermal = SW/HW thermal (0x20, 0x40); power = SW power "
                                  "cap, HW slowdown, power brake (0x4, 0x8, 0x80)."))
        .with_panel(g("P-state", "none", ("DCGM_FI_DEV_PSTATE", "")))
        .with_row(Row("Interconnect and errors"))
        .with_panel(g("PCIe", "Bps", ("DCGM_FI_PROF_PCIE_TX_BYTES", "tx"), ("DCGM_FI_PROF_PCIE_RX_BYTES", "rx")))
        .with_panel(g("NVLink", "Bps", ("DCGM_FI_PROF_NVLINK_TX_BYTES", "tx"), ("DCGM_FI_PROF_NVLINK_RX_BYTES", "rx")))
        .with_panel(g("PCIe replays, ECC errors, last XID", "none",
                      ("increase({DCGM_FI_DEV_PCIE_REPLAY_COUNTER}[5m])", "pcie replays/5m"),
                      ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc sbe"), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc dbe"),
                      ("DCGM_FI_DEV_XID_ERRORS", "xid")))
        .with_row(Row("Inference server (pods annotated gpuwatch.io/scrape-port)"))
        .with_panel(g("Requests", "reqps", ("gpuwatch_inference_requests_per_second", ""),
                      description="Requests the pod's inference server (Triton, vLLM) completed per second; the "
                                  "pod's figure, on each of its GPUs."))
        .with_panel(g("Queue, compute, first token", "s", ("gpuwatch_inference_queue_seconds", "queue"),
                      ("gpuwatch_inference_compute_seconds", "compute"), ("gpuwatch_inference_ttft_seconds", "ttft"),
                      description="Mean per request over the agent's last scrape interval."))
        .with_panel(g("Pending / running requests, KV cache", "none",
                      ("gpuwatch_inference_pending_requests", "pending"),
                      ("gpuwatch_inference_running_requests", "running"),
                      ("100 * {gpuwatch_inference_kv_cache_ratio}", "kv cache %")))
        .with_row(Row("Processes"))
        .with_panel(ts("Process memory", "bytes", prom(
            f"sum by (namespace, pod, process_name, pid) (gpuwatch_process_used_memory_bytes{{{f}}})",
            "{{namespace}}/{{pod}} {{process_name}} ({{pid}})")))
        .with_panel(ts("Process SM utilization", "percent", prom(
            f"max by (namespace, pod, process_name, pid) (gpuwatch_process_sm_util{{{f}}})",
            "{{namespace}}/{{pod}} {{process_name}} ({{pid}})")))
        .with_panel(table("Events on this node", Sql(
            "SELECT ts AS time, gpu, kind, code, detail FROM events WHERE node = '$Hostname' AND $__timeFilter(ts)"
            " ORDER BY ts DESC LIMIT 500", "table")))
    )


_SVC = "namespace IN ($namespace) AND service IN ($service)"


def service_history() -> Dashboard:
    def per_step(value: str) -> Sql:
        return Sql(f"SELECT $__timeGroupAlias(bucket, $__interval), service AS metric, {value} AS value"
                   f" FROM service_usage_1m WHERE $__timeFilter(bucket) AND {_SVC} GROUP BY 1, 2 ORDER BY 1")

    def total(value: str) -> Sql:
        return Sql(f"SELECT {value} AS value FROM service_usage_1m WHERE $__timeFilter(bucket) AND {_SVC}", "table")

    return (
        base("gpuwatch-service-history", "gpuwatch / Service history and cost",
             "What each service used over time, from the collector's per-service rollups (service_usage_1m, "
             "service_pod_usage_1m): GPU time, SM and tensor activity, memory, energy and cost.")
        .time("now-7d", "now")
        .with_variable(pg_datasource())
        .with_variable(sql_variable("namespace", "SELECT DISTINCT namespace FROM service_usage_1m"
                                                 " WHERE namespace IS NOT NULL ORDER BY 1", "Namespace"))
        .with_variable(sql_variable("service", "SELECT DISTINCT service FROM service_usage_1m"
                                               " WHERE namespace IN ($namespace) ORDER BY 1", "Service"))
        .with_variable(TextBoxVariable("price").label("Price per GPU-hour").default_value("2.5")
                       .description("The cost of one GPU-hour (the collector's --price-per-gpu-hour)."))
        .with_row(Row("Totals over the range"))
        .with_panel(stat("GPU-hours", "none", total("sum(gpu_seconds) / 3600"), span=6, decimals=1))
        .with_panel(stat("Average SM active", "percentunit",
                         total("sum(sm_active_weighted) / NULLIF(sum(sm_active_weight), 0)"), span=6))
        .with_panel(stat("Energy", "kwatth", total("sum(energy_j) / 3600000.0"), span=6, decimals=1))
        .with_panel(stat("Cost", "none", total("sum(gpu_seconds) / 3600 * $price"), span=6, decimals=2,
                         description="GPU-hours times the price variable."))
        .with_row(Row("Over time"))
        .with_panel(ts("GPUs held", "none", per_step("sum(gpu_seconds) / ($__interval_ms / 1000.0)"),
                       min_interval="1m", description="GPU-seconds per step / the step: the average GPUs held."))
        .with_panel(ts("SM active", "percentunit",
                       per_step("sum(sm_active_weighted) / NULLIF(sum(sm_active_weight), 0)"), min_interval="1m",
                       description="Averaged over the GPU-seconds the service held, weighted by them."))
        .with_panel(ts("Tensor pipe active", "percentunit",
                       per_step("sum(tensor_active_weighted) / NULLIF(sum(tensor_active_weight), 0)"),
                       min_interval="1m"))
        .with_panel(ts("Memory used", "decmbytes", per_step("sum(memory_mib) / ($__interval_ms / 60000.0)"),
                       min_interval="1m", description="Process memory summed over the service's GPUs, averaged "
                                                      "over the step."))
        .with_panel(ts("Energy per step", "kwatth", per_step("sum(energy_j) / 3600000.0"), min_interval="1m"))
        .with_panel(ts("Cost per step", "none", per_step("sum(gpu_seconds) / 3600 * $price"), min_interval="1m"))
        .with_row(Row("Pods"))
        .with_panel(table("Per pod over the range", Sql(
            "SELECT namespace, service, pod, sum(gpu_seconds) / 3600 AS gpu_hours,"
            " sum(sm_active_weighted) / NULLIF(sum(sm_active_weight), 0) AS sm_active,"
            " sum(tensor_active_weighted) / NULLIF(sum(tensor_active_weight), 0) AS tensor_active,"
            " sum(memory_mib) / NULLIF(sum(gpu_minutes), 0) AS memory_mib_per_gpu,"
            " sum(energy_j) / 3600000.0 AS energy_kwh, sum(gpu_seconds) / 3600 * $price AS cost"
            f" FROM service_pod_usage_1m WHERE $__timeFilter(bucket) AND {_SVC}"
            " GROUP BY 1, 2, 3 ORDER BY gpu_hours DESC LIMIT 1000", "table")))
    )


_OVERLAPS = "start_ts <= $__timeTo() AND (end_ts IS NULL OR end_ts >= $__timeFrom())"


def anomalies() -> Dashboard:
    return (
        base("gpuwatch-anomalies", "gpuwatch / Anomalies, alerts and events",
             "What the collector's detectors found, what was alerted, and the GPUs' events, on the fleet's "
             "activity (annotations).")
        .time("now-24h", "now")
        .with_variable(prom_datasource())
        .with_variable(pg_datasource())
        .with_variable(CustomVariable("severity").label("Severity").values("critical,warning,info")
                       .multi(True).include_all(True)
                       .current(VariableOption(selected=True, text="All", value="$__all")))
        .annotation(AnnotationQuery().name("Anomalies").datasource(PG).enable(True).icon_color("red")
                    .target(Sql(f"SELECT start_ts AS time, end_ts AS timeend, summary AS text, kind AS tags"
                                f" FROM anomalies WHERE {_OVERLAPS} AND severity IN ($severity) ORDER BY start_ts",
                                "table")))  # type: ignore[arg-type]
        .annotation(AnnotationQuery().name("GPU events").datasource(PG).enable(True).icon_color("orange")
                    .target(Sql("SELECT ts AS time, node || ' ' || kind || coalesce(' ' || code::text, '') AS text,"
                                " kind AS tags FROM events WHERE $__timeFilter(ts) ORDER BY ts",
                                "table")))  # type: ignore[arg-type]
        .with_row(Row("Now"))
        .with_panel(stat("Open anomalies", "none", Sql(
            "SELECT count(*) AS value FROM anomalies WHERE end_ts IS NULL AND severity IN ($severity)", "table"),
            span=6))
        .with_panel(stat("Anomalies in range", "none", Sql(
            f"SELECT count(*) AS value FROM anomalies WHERE {_OVERLAPS} AND severity IN ($severity)", "table"),
            span=6))
        .with_panel(stat("Alerts firing", "none", Sql(
            "SELECT count(*) AS value FROM alerts WHERE status = 'firing' AND NOT silenced", "table"), span=6))
        .with_panel(stat("Events in range", "none", Sql(
            "SELECT count(*) AS value FROM events WHERE $__timeFilter(ts)", "table"), span=6))
        .with_row(Row("Over time, with anomalies and events as annotations"))
        .with_panel(ts("SM active by node (Prometheus)", "percentunit", prom(
            "avg by (Hostname) (DCGM_FI_PROF_SM_ACTIVE)", "{{Hostname}}")))
        .with_panel(ts("SM active by node (history, 1-minute rollup)", "percentunit", Sql(
            "SELECT $__timeGroupAlias(bucket, $__interval), node AS metric, avg(dcgm_fi_prof_sm_active) AS value"
            " FROM gpu_samples_1m WHERE $__timeFilter(bucket) GROUP BY 1, 2 ORDER BY 1"), min_interval="1m"))
        .with_panel(ts("Anomalies by kind", "none", Sql(
            "SELECT $__timeGroupAlias(start_ts, $__interval), kind AS metric, count(*) AS value FROM anomalies"
            " WHERE $__timeFilter(start_ts) AND severity IN ($severity) GROUP BY 1, 2 ORDER BY 1"),
            min_interval="1m"))
        .with_panel(ts("Events by kind", "none", Sql(
            "SELECT $__timeGroupAlias(ts, $__interval), kind AS metric, count(*) AS value FROM events"
            " WHERE $__timeFilter(ts) GROUP BY 1, 2 ORDER BY 1"), min_interval="1m"))
        .with_row(Row("Lists"))
        .with_panel(table("Anomalies", Sql(
            "SELECT start_ts AS time, end_ts AS ended, severity, kind, node, gpu, namespace, pod, service,"
            f" summary, causes::text AS causes FROM anomalies WHERE {_OVERLAPS} AND severity IN ($severity)"
            " ORDER BY start_ts DESC LIMIT 500", "table")))
        .with_panel(table("Alerts", Sql(
            "SELECT starts_at AS time, ends_at AS ended, status, severity, rule, namespace, service, node, gpu,"
            " summary, silenced FROM alerts WHERE starts_at <= $__timeTo()"
            " AND (ends_at IS NULL OR ends_at >= $__timeFrom()) ORDER BY starts_at DESC LIMIT 500", "table")))
        .with_panel(table("Events", Sql(
            "SELECT ts AS time, node, gpu, kind, code, detail FROM events WHERE $__timeFilter(ts)"
            " ORDER BY ts DESC LIMIT 1000", "table")))
    )


def health() -> Dashboard:
    info = "on (instance) group_left (Hostname) gpuwatch_agent_info"
    rate = "[$__rate_interval]"

    def per_node(expr: str) -> str:
        """``expr`` (one series per agent) with the agent's node name, the max per node."""
        return f"max by (Hostname) ({expr} * {info})"

    def counts(title: str, *counters: tuple[str, str], description: str = "") -> Timeseries:
        """A panel of fleet-wide counter increases per step: (counter, legend) each."""
        return ts(title, "none", *(prom(f"sum(increase({c}{rate}))", legend) for c, legend in counters), span=8,
                  description=description)

    return (
        base("gpuwatch-health", "gpuwatch / Agent and collector health",
             "gpuwatch's own health: samples and intervals, the CPU budget, NVML cost, Kafka, the spool and "
             "the control topic on the agents; ingest, lag, stalls, dead letters, keyframe requests and the "
             "database on the collectors.")
        .with_variable(prom_datasource())
        .with_variable(pg_datasource())
        .with_row(Row("Agents: sampling and budget"))
        .with_panel(ts("GPU samples per second", "ops", prom(
            f"sum by (Hostname) (rate(gpuwatch_agent_samples_total{rate}) * {info})", "{{Hostname}}"), span=8))
        .with_panel(ts("Sampling interval", "s",
                       prom(f"max by (Hostname, UUID) (gpuwatch_agent_sample_interval_seconds * {info})",
                            "{{Hostname}} {{UUID}}"),
                       prom(per_node("gpuwatch_agent_interval_ceiling_seconds"), "ceiling {{Hostname}}"),
                       span=8, description="The adaptive interval of each GPU (busy GPUs faster, idle ones slower); "
                                           "the budget never stretches one past the ceiling."))
        .with_panel(ts("CPU by account", "percentunit",
                       prom(f"max by (Hostname, account) (rate(gpuwatch_agent_cpu_seconds_total{rate}) * {info})",
                            "{{account}} {{Hostname}}"),
                       prom(per_node("gpuwatch_agent_cpu_budget_ratio"), "sampling budget {{Hostname}}"),
                       prom(per_node("gpuwatch_agent_transport_cpu_budget_ratio"), "transport budget {{Hostname}}"),
                       prom(per_node(f"rate(process_cpu_seconds_total{rate})"), "process {{Hostname}}"), span=8,
                       description="Thread CPU time of the agent's own threads by account (sampling: sampling and "
                                   "XID threads, what the sampling budget governs; transport: framing, Kafka, "
                                   "spool, control topic; http: /metrics), against the budgets, and the whole "
                                   "process."))
        .with_panel(ts("Sampling threads against their budget", "percentunit",
                       prom(per_node("gpuwatch_agent_cpu_usage_ratio"), "used {{Hostname}}"),
                       prom(per_node("gpuwatch_agent_cpu_budget_ratio"), "budget {{Hostname}}"), span=8,
                       description="CPU of the sampling threads over the budget's recent window (the figure the "
                                   "budget acts on)."))
        .with_panel(ts("Interval stretch", "none", prom(per_node("gpuwatch_agent_interval_stretch"), "{{Hostname}}"),
                       span=8, description="Factor the CPU budget applies to every interval (1: within budget); "
                                           "never past the ceiling interval."))
        .with_panel(ts("Samples the budget stretched or held at the ceiling", "ops",
                       prom(f"sum by (Hostname) (rate(gpuwatch_agent_budget_stretched_samples_total{rate}) * {info})",
                            "stretched {{Hostname}}"),
                       prom(f"sum by (Hostname) (rate(gpuwatch_agent_budget_capped_samples_total{rate}) * {info})",
                            "held at the ceiling {{Hostname}}"), span=8,
                       description="Stretched: the budget lengthened the next interval. Held at the ceiling: it "
                                   "would have gone past the ceiling interval and was kept there (the agent needs "
                                   "more CPU than its budget; raise agent.sampling.cpuBudget)."))
        .with_panel(ts("Resident memory", "bytes", prom(per_node("process_resident_memory_bytes"), "{{Hostname}}"),
                       span=8))
        .with_panel(ts("NVML time per call", "s", prom(
            f"sum by (call) (rate(gpuwatch_agent_nvml_call_seconds_total{rate})) / "
            f"sum by (call) (rate(gpuwatch_agent_nvml_calls_total{rate}))", "{{call}}"), span=8))
        .with_panel(ts("Agent errors", "none", prom(
            f"sum by (kind) (increase(gpuwatch_agent_errors_total{rate}))", "{{kind}}"), span=8))
        .with_row(Row("Agents: Kafka, spool, control topic"))
        .with_panel(ts("Kafka: sent, spooled, replayed", "ops",
                       prom(f"sum(rate(gpuwatch_agent_kafka_sent_total{rate}))", "sent"),
                       prom(f"sum(rate(gpuwatch_agent_kafka_spooled_total{rate}))", "spooled"),
                       prom(f"sum(rate(gpuwatch_agent_kafka_replayed_total{rate}))", "replayed"),
                       prom(f"sum(rate(gpuwatch_agent_kafka_send_errors_total{rate}))", "send errors"), span=8))
        .with_panel(counts("Telemetry lost on the agents",
                           ("gpuwatch_agent_spool_dropped_total", "spool bound (oldest dropped)"),
                           ("gpuwatch_agent_memory_dropped_total", "memory (the spool could not take them)"),
                           ("gpuwatch_agent_spool_corrupt_messages_total", "spool damage"),
                           ("gpuwatch_agent_kafka_rejected_total", "rejected by Kafka"),
                           description="Messages lost, by cause. Each is a separate counter: the spool's bound "
                                       "(agent.spool.maxMB), memory while the spool's disk failed, damaged spool "
                                       "regions, and messages Kafka refused for themselves (too large, corrupt)."))
        .with_panel(ts("Backlog", "bytes",
                       prom(per_node("gpuwatch_agent_spool_bytes"), "spool {{Hostname}}"),
                       prom(per_node("gpuwatch_agent_memory_bytes"), "memory {{Hostname}}"), span=8,
                       description="What waits to be sent: on disk (the spool) and in memory."))
        .with_panel(counts("Spool faults",
                           ("gpuwatch_agent_spool_write_errors_total", "write errors (disk full?)"),
                           ("gpuwatch_agent_spool_corrupt_total", "damaged regions stepped over")))
        .with_panel(ts("Agents not connected", "none",
                       prom("count(gpuwatch_agent_kafka_connected == 0) or vector(0)", "to Kafka"),
                       prom("count(gpuwatch_agent_control_connected == 0) or vector(0)", "to the control topic"),
                       span=8, description="Agents whose producer is not connected (they spool), and agents not "
                                           "reading the control topic (keyframe requests do not reach them)."))
        .with_panel(counts("Keyframes and control messages",
                           ("gpuwatch_agent_control_keyframe_requests_total", "requested by the collector"),
                           ("gpuwatch_agent_keyframe_requests_total", "keyframes forced (sender, collector)"),
                           ("gpuwatch_agent_control_malformed_total", "malformed control messages")))
        .with_panel(counts("Kernel probe windows",
                           ("gpuwatch_agent_probe_windows_forwarded_total", "forwarded"),
                           ("gpuwatch_agent_probe_unattributed_total", "forwarded without a GPU or pod"),
                           ("gpuwatch_agent_probe_rejected_total", "rejected (malformed)"),
                           ("gpuwatch_agent_probe_budget_dropped_total", "dropped over the CPU budget"),
                           description="Windows the workloads' CUPTI probes sent to the agents' sockets: forwarded "
                                       "to the collector (with the pod of the sender's pid), or dropped; the agent's "
                                       "log names what was wrong with a rejected one."))
        .with_row(Row("Collectors: ingest"))
        .with_panel(ts("Records stored per second", "ops",
                       prom(f"sum(rate(gpuwatch_collector_records_total{rate}))", "records"),
                       prom(f"sum(rate(gpuwatch_collector_events_total{rate}))", "events"), span=8))
        .with_panel(ts("Consumer lag", "none",
                       prom("max by (partition) (gpuwatch_collector_consumer_lag_messages)", "partition {{partition}}"),
                       prom("sum(gpuwatch_collector_consumer_lag_messages_all)", "all"), span=8,
                       description="Messages between each partition's end offset (read every few seconds) and what "
                                   "the collector consumed: a stalled partition shows as growing lag."))
        .with_panel(ts("Partition stalls", "s",
                       prom("max by (partition) (gpuwatch_collector_partition_stalled_seconds)",
                            "partition {{partition}}"), span=8,
                       description="Seconds a partition with messages waiting has delivered nothing (0: flowing). "
                                   "Past collector.kafka.stallAfterSeconds the collector logs it and restarts "
                                   "its fetch."))
        .with_panel(counts("Dead letters",
                           ("gpuwatch_collector_dead_lettered_frames_total", "dead-lettered"),
                           ("gpuwatch_collector_dead_letters_in_database_total", "into the database"),
                           ("gpuwatch_collector_dead_letters_truncated_total", "cut to fit"),
                           description="Messages set aside (undecodable, invalid): to the dead-letter topic, or "
                                       "into the dead_letters table when the topic did not take them; long ones cut "
                                       "to the dead-letter producer's limit."))
        .with_panel(counts("Skipped, duplicate and baseless frames",
                           ("gpuwatch_collector_frames_skipped_total", "skipped"),
                           ("gpuwatch_collector_duplicate_frames_total", "duplicate"),
                           ("gpuwatch_collector_frames_without_base_total", "without base")))
        .with_panel(counts("Keyframe requests and GPU UUID conflicts",
                           ("gpuwatch_collector_keyframe_requests_total", "keyframe requests"),
                           ("gpuwatch_collector_keyframe_request_errors_total", "requests not delivered"),
                           ("gpuwatch_collector_gpu_uuid_conflicts_total", "GPU UUID conflicts"),
                           description="Keyframe requests to agents whose stream lost its base (on the control topic); "
                                       "GPU UUIDs reported by two nodes at once (each is also a gpu_uuid_conflict "
                                       "event)."))
        .with_row(Row("Collectors: Kafka and the database"))
        .with_panel(counts("Kafka client errors",
                           ("gpuwatch_collector_fetch_errors_total", "fetch"),
                           ("gpuwatch_collector_commit_errors_total", "commit"),
                           ("gpuwatch_collector_partition_log_resets_total", "partition log resets"),
                           description="A log reset: a partition shorter than what was read (the broker lost "
                                       "data); the collector reads it again from its beginning."))
        .with_panel(ts("Database round trip", "s",
                       prom("max by (instance) (gpuwatch_collector_db_latency_seconds)", "{{instance}}"),
                       prom("min(gpuwatch_collector_db_up)", "up"), span=8))
        .with_panel(counts("Database retries",
                           ("gpuwatch_collector_db_retries_total", "retries"),
                           description="Database operations of the ingest path retried while the database was away or "
                                       "refused work; meanwhile nothing is stored (Kafka keeps the data)."))
        .with_panel(ts("Ingest rate (collector's own)", "ops", prom(
            "sum(gpuwatch_collector_ingest_records_per_second)", "records/s"), span=8))
        .with_panel(stat("Dead letters in the database", "none", Sql(
            "SELECT count(*) AS value FROM dead_letters WHERE $__timeFilter(recorded_at)", "table"), span=4,
            description="Rows of the dead_letters table in the range: messages the dead-letter topic did not take."))
        .with_panel(table("Dead letters in the database (newest)", Sql(
            "SELECT recorded_at AS time, topic, partition, \"offset\", size, reason, why_not_kafka, sha256"
            " FROM dead_letters WHERE $__timeFilter(recorded_at) ORDER BY recorded_at DESC LIMIT 200", "table"),
            span=12, height=8,
            description="Source topic, partition and offset of each; the value (its first MiB) is in the table."))
    )


def dcgm() -> Dashboard:
    f = 'Hostname=~"$Hostname", gpu=~"$gpu"'
    legend = "{{Hostname}} {{gpu}}"
    return (
        base("gpuwatch-dcgm", "GPU metrics (dcgm-exporter names)",
             "Only dcgm-exporter's metric names and labels: the same dashboard works on gpuwatch's agent and on "
             "NVIDIA's dcgm-exporter, so exporters can be switched without losing it.")
        .tags(["gpuwatch", "dcgm-exporter", "nvidia"])
        .with_variable(prom_datasource())
        .with_variable(prom_label("Hostname", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)", "Node"))
        .with_variable(prom_label("gpu", 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, gpu)', "GPU"))
        .with_panel(ts("GPU temperature", "celsius", prom(f"DCGM_FI_DEV_GPU_TEMP{{{f}}}", legend)))
        .with_panel(ts("Power usage", "watt", prom(f"DCGM_FI_DEV_POWER_USAGE{{{f}}}", legend)))
        .with_panel(stat("Total power", "watt", prom(f"sum(DCGM_FI_DEV_POWER_USAGE{{{f}}})"), span=6))
        .with_panel(stat("Hottest GPU", "celsius", prom(f"max(DCGM_FI_DEV_GPU_TEMP{{{f}}})"), span=6))
        .with_panel(stat("Energy since boot", "kwatth", prom(
            f"sum(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{f}}}) / 3600000000"), span=6))
        .with_panel(stat("GPUs", "none", prom(f"count(DCGM_FI_DEV_GPU_TEMP{{{f}}})"), span=6))
        .with_panel(ts("SM clocks", "rotmhz", prom(f"DCGM_FI_DEV_SM_CLOCK{{{f}}}", legend)))
        .with_panel(ts("GPU utilization", "percent", prom(f"DCGM_FI_DEV_GPU_UTIL{{{f}}}", legend)))
        .with_panel(ts("Framebuffer used", "decmbytes", prom(f"DCGM_FI_DEV_FB_USED{{{f}}}", legend)))
        .with_panel(ts("Memory copy utilization", "percent", prom(f"DCGM_FI_DEV_MEM_COPY_UTIL{{{f}}}", legend)))
        .with_panel(ts("SM active (profiling)", "percentunit", prom(f"DCGM_FI_PROF_SM_ACTIVE{{{f}}}", legend),
                       description="DCGM profiling metric: needs GPM (gpuwatch, Hopper+) or DCGM's profiling module."))
        .with_panel(ts("Tensor pipe active (profiling)", "percentunit",
                       prom(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{f}}}", legend)))
        .with_panel(ts("GPU utilization per pod", "percent", prom(
            f'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{{f}, pod!=""}})', "{{namespace}}/{{pod}}")))
        .with_panel(ts("XID errors (last code)", "none", prom(f"DCGM_FI_DEV_XID_ERRORS{{{f}}}", legend)))
    )


# the kernel probe's tables (collector/migrations/*/0070_kernel_stats.sql); a window the agent could not
# attribute has no service, and is shown (and chosen) as this
_UNATTRIBUTED = "'(unattributed)'"
_KSVC = f"coalesce(service, {_UNATTRIBUTED}) IN ($service)"
_KSEL = f"FROM kernel_stats WHERE $__timeFilter(ts) AND {_KSVC}"
#: The flame graph as Grafana's panel reads a nested set: one row per node in depth-first order
#: (level, value including the children, self, label). Each level is one GROUP BY of the same rows;
#: ordering by the node's path (an array: a prefix sorts before its extensions, siblings by label)
#: puts every parent right before its children.
KERNEL_FLAME_SQL = f"""
WITH k AS (
  SELECT coalesce(service, {_UNATTRIBUTED}) AS service,
         coalesce(namespace || '/' || pod, pod, '(no pod)') AS pod, category, kernel,
         sum(total_ns) / 1000.0 AS us
  {_KSEL} GROUP BY 1, 2, 3, 4
), nodes AS (
  SELECT 0 AS level, ARRAY[]::text[] AS path, 'total' AS label, sum(us) AS value, 0 AS self FROM k
    HAVING count(*) > 0
  UNION ALL SELECT 1, ARRAY[service], service, sum(us), 0 FROM k GROUP BY service
  UNION ALL SELECT 2, ARRAY[service, pod], pod, sum(us), 0 FROM k GROUP BY service, pod
  UNION ALL SELECT 3, ARRAY[service, pod, category], category, sum(us), 0 FROM k GROUP BY service, pod, category
  UNION ALL SELECT 4, ARRAY[service, pod, category, kernel], kernel, us, us FROM k
)
SELECT level, value::float8 AS value, self::float8 AS self, label FROM nodes ORDER BY path
"""
TOP_KERNELS = 8


def kernels() -> Dashboard:
    def share_over_time(group: str) -> Sql:
        """Each group's share of the kernel time in each step (``group``: a column of kernel_stats)."""
        return Sql(f"WITH per AS (SELECT $__timeGroupAlias(ts, $__interval), {group} AS metric,"
                   f" sum(total_ns) AS ns {_KSEL} GROUP BY 1, 2)"
                   " SELECT time, metric, ns::float8 / NULLIF(sum(ns) OVER (PARTITION BY time), 0) AS value"
                   " FROM per ORDER BY 1, 2")

    top = (f"CASE WHEN kernel IN (SELECT kernel {_KSEL} GROUP BY kernel ORDER BY sum(total_ns) DESC"
           f" LIMIT {TOP_KERNELS}) THEN left(kernel, 120) ELSE '(the other kernels)' END")
    windows = f"FROM kernel_windows WHERE $__timeFilter(ts) AND {_KSVC}"
    flame = (Panel().type("flamegraph").title("Kernel time: service, pod, category, kernel").span(24).height(14)
             .datasource(PG).unit("µs").with_target(Sql(KERNEL_FLAME_SQL, "table").ref_id("A"))
             .description("Kernel time the probes recorded in the range, in µs, nested service > pod > kernel "
                          "category > kernel. Recorded time: a probe records about 1 s in every 10 s "
                          "(GPUWATCH_PROBE_PERIOD_S), so this is a sample of the GPU's kernels, in proportion."))
    return (
        base("gpuwatch-kernels", "gpuwatch / Kernels",
             "What the GPUs run, from the opt-in CUPTI probe (issue 15): kernel time by service, pod, category and "
             "kernel, the top kernels' share over time, and each kernel's calls, duration and occupancy "
             "(collector tables kernel_stats and kernel_windows).")
        .time("now-6h", "now")
        .with_variable(pg_datasource())
        .with_variable(sql_variable("service", f"SELECT DISTINCT coalesce(service, {_UNATTRIBUTED}) FROM kernel_stats"
                                               " WHERE $__timeFilter(ts) ORDER BY 1", "Service"))
        .with_row(Row("Over the range"))
        .with_panel(stat("Recorded kernel time", "s", Sql(f"SELECT sum(total_ns) / 1e9 AS value {_KSEL}", "table"),
                         span=6, description="Summed over the probes' recording windows (about 1 s in 10 s)."))
        .with_panel(stat("Processes profiled", "none", Sql(
            f"SELECT count(DISTINCT (node, pid)) AS value {windows}", "table"), span=6))
        .with_panel(stat("GPU busy while recording", "percentunit", Sql(
            f"SELECT sum(busy_ns) / NULLIF(sum(duration_s) * 1e9, 0) AS value {windows}", "table"), span=6,
            description="Union of the kernels' intervals over the recorded time (a process on several GPUs counts "
                        "each)."))
        .with_panel(stat("Kernels under 10 µs", "percentunit", Sql(
            f"SELECT sum(short_calls)::float8 / NULLIF(sum(calls), 0) AS value {_KSEL}", "table"), span=6,
            description="Share of kernel launches shorter than 10 µs: many of them make a launch-bound step "
                        "(fusion, CUDA graphs)."))
        .with_row(Row("Where the kernel time goes"))
        .with_panel(flame)
        .with_row(Row("Over time"))
        .with_panel(ts("Top kernels, share of kernel time", "percentunit", share_over_time(top), min_interval="1m",
                       description=f"The {TOP_KERNELS} kernels with the most time in the range, each step's share "
                                   "of the recorded kernel time; the rest together."))
        .with_panel(ts("Kernel time by category", "percentunit", share_over_time("category"), min_interval="1m",
                       description="gemm, attention, communication, ... as telemetry/kernels.py's CATEGORIES name "
                                   "them by the kernel's name."))
        .with_panel(ts("GPU busy while recording, per service", "percentunit", Sql(
            f"SELECT $__timeGroupAlias(ts, $__interval), coalesce(service, {_UNATTRIBUTED}) AS metric,"
            f" sum(busy_ns) / NULLIF(sum(duration_s) * 1e9, 0) AS value {windows} GROUP BY 1, 2 ORDER BY 1"),
            min_interval="1m"))
        .with_panel(ts("CPU in launch calls and synchronisation, per service", "percentunit", Sql(
            f"SELECT $__timeGroupAlias(ts, $__interval), coalesce(service, {_UNATTRIBUTED}) || ' ' || p.part AS metric,"
            " sum(p.ns) / NULLIF(sum(duration_s) * 1e9, 0) AS value"
            " FROM kernel_windows, LATERAL (VALUES ('launch', launch_ns), ('sync', sync_ns)) AS p(part, ns)"
            f" WHERE $__timeFilter(ts) AND {_KSVC} GROUP BY 1, 2 ORDER BY 1"), min_interval="1m",
            description="Time in cudaLaunchKernel (and kin) and in synchronisations over the recorded time: a "
                        "Python loop feeding the GPU shows as launch time, waits for results as sync time."))
        .with_row(Row("Top kernels"))
        .with_panel(table("Top kernels over the range", Sql(
            "SELECT kernel, category, sum(calls) AS calls,"
            " sum(total_ns)::float8 / NULLIF(sum(sum(total_ns)) OVER (), 0) AS time_share,"
            " sum(total_ns) / 1000.0 / NULLIF(sum(calls), 0) AS mean_us,"
            " max(p95_ns) / 1000.0 AS p95_us,"
            " (array_agg(occupancy ORDER BY total_ns DESC))[1] AS occupancy,"
            " sum(short_calls)::float8 / NULLIF(sum(calls), 0) AS short_share"
            f" {_KSEL} GROUP BY kernel, category ORDER BY sum(total_ns) DESC LIMIT 50", "table"), height=12,
            description="Calls and time of each kernel (by demangled name) in the range; time share of the recorded "
                        "kernel time; mean and p95 duration (the largest of the windows' p95s, as the API's); "
                        "theoretical occupancy of its launch shape in the window where it took the most time; "
                        "share of calls under 10 µs."))
    )


DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "gpuwatch-fleet": fleet,
    "gpuwatch-gpu": gpu_detail,
    "gpuwatch-service-history": service_history,
    "gpuwatch-anomalies": anomalies,
    "gpuwatch-health": health,
    "gpuwatch-dcgm": dcgm,
    "gpuwatch-kernels": kernels,
}


def render(make: Callable[[], Dashboard]) -> str:
    """The dashboard as Grafana JSON (stable key order, so regenerating gives the same bytes)."""
    model = json.loads(JSONEncoder(sort_keys=True).encode(make().build()))
    model.pop("id", None)  # provisioned dashboards are found by uid
    return json.dumps(model, indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare with the committed files; exit 1 if they differ")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for out in OUTPUTS:
        expected = {f"{uid}.json": render(make) for uid, make in DASHBOARDS.items()}
        present = {p.name for p in out.glob("*.json")} if out.is_dir() else set()
        for name, text in expected.items():
            path = out / name
            if args.check:
                if not path.is_file() or path.read_text() != text:
                    stale.append(str(path.relative_to(ROOT)))
            else:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        for extra in sorted(present - set(expected)):
            if args.check:
                stale.append(f"{(out / extra).relative_to(ROOT)} (not generated)")
            else:
                (out / extra).unlink()
    if stale:
        print("dashboards out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
