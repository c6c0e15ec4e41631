"""The chart's PrometheusRule under ``promtool``: valid rules, and each alert unit-tested.

The rule groups are taken from the rendered PrometheusRule (not a copy), written as a
Prometheus rules file, checked with ``promtool check rules`` and run through ``promtool
test rules``: for every alert one input that must fire it (with its exact labels and
annotations) and one that must leave it quiet.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm import Chart, value_set

AGENT = {"job": "gpuwatch-agent", "instance": "10.0.0.7:9400"}
COLLECTOR = {"job": "gpuwatch-collector", "instance": "10.0.1.3:8080"}
GPU = {**AGENT, "UUID": "GPU-11111111-2222-3333-4444-555555555555", "gpu": "3", "Hostname": "gpu-node-07",
       "modelName": "NVIDIA H200", "namespace": "research", "pod": "trainer-0", "container": "main"}
OTHER_GPU = {**GPU, "UUID": "GPU-99999999-2222-3333-4444-555555555555", "gpu": "4", "pod": "", "namespace": ""}


@dataclass
class Case:
    """An alert, an input that fires it, one that does not, and when to look."""

    alert: str
    metric: str
    labels: dict[str, str]
    firing: str
    quiet: str
    eval_time: str
    alert_labels: dict[str, str] | None = None  # after aggregation (default: the series' labels)
    value: float = 0.0  # $value in the annotations
    extra_quiet: list[tuple[dict[str, str], str]] = field(default_factory=list)
    # series of other metrics the rule reads, in every input: (metric, labels, values)
    context: list[tuple[str, dict[str, str], str]] = field(default_factory=list)


CASES = [
    Case("GpuwatchGpuLost", "gpuwatch_agent_gpu_up", {**AGENT, "UUID": GPU["UUID"]}, "1 1 0x10", "1x12", "6m",
         value=0),
    Case("GpuwatchXidError", "DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 0 79x10", "0x12", "5m", value=79,
         # an XID seen long ago (the gauge keeps the last code) is not news
         extra_quiet=[({**OTHER_GPU, "UUID": "GPU-old"}, "13x30")]),
    Case("GpuwatchThermalThrottling", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU, "0 64x10", "1x12", "4m", value=2,
         # SW power cap alone (0x4) is normal at full load
         extra_quiet=[({**OTHER_GPU, "UUID": "GPU-capped"}, "4x12")]),
    Case("GpuwatchPowerThrottling", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU, "0 128x10", "4x12", "4m", value=1,
         extra_quiet=[({**OTHER_GPU, "UUID": "GPU-hot"}, "64x12")]),
    Case("GpuwatchEccDoubleBitErrors", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0 0 0 2x10", "5x12", "5m", value=2),
    Case("GpuwatchAgentDown", "up", AGENT, "1 0x10", "1x12", "7m", value=0),
    Case("GpuwatchAgentNotSending", "gpuwatch_agent_kafka_connected", AGENT, "1 0x10", "1x12", "7m", value=0),
    Case("GpuwatchAgentSpoolDropping", "gpuwatch_agent_spool_dropped_total", AGENT, "0 0 0 40x10", "7x12", "5m",
         value=40),
    Case("GpuwatchAgentDroppingFromMemory", "gpuwatch_agent_memory_dropped_total", AGENT, "0 0 0 25x10", "3x12",
         "5m", value=25),
    Case("GpuwatchAgentSpoolFailing", "gpuwatch_agent_spool_write_errors_total", AGENT, "0 0 0 6x10", "2x12", "5m",
         value=6, context=[("gpuwatch_agent_spool_corrupt_total", AGENT, "1x12")],
         # damage found long ago (the counter does not move) is not news either
         extra_quiet=[({**AGENT, "instance": "10.0.0.8:9400"}, "0x12")]),
    Case("GpuwatchAgentKafkaRejecting", "gpuwatch_agent_kafka_rejected_total", AGENT, "0 0 0 2x10", "9x12", "5m",
         value=2),
    Case("GpuwatchAgentControlTopicUnread", "gpuwatch_agent_control_connected", AGENT, "1 0x20", "0x22", "15m",
         value=0, context=[("gpuwatch_agent_kafka_connected", AGENT, "1x22"),
                           # an agent that reaches no broker at all is GpuwatchAgentNotSending's
                           ("gpuwatch_agent_kafka_connected", {**AGENT, "instance": "10.9.9.9:1"}, "0x22")]),
    Case("GpuwatchAgentSamplingHeldAtCeiling", "gpuwatch_agent_budget_capped_samples_total", AGENT,
         "0 0 0 0 0+40x30", "0 5 10 15 20x30", "25m", value=40 / 60,
         # held at the ceiling for the last 10 minutes only: not yet 15
         extra_quiet=[({**AGENT, "instance": "10.0.0.8:9400"}, "0x14 0+40x16")]),
    Case("GpuwatchCollectorDown", "up", COLLECTOR, "1 0x10", "1x12", "7m", value=0),
    Case("GpuwatchCollectorLagging", "gpuwatch_collector_consumer_lag_messages_all", COLLECTOR, "250000x15",
         "900x15", "12m", alert_labels={"job": COLLECTOR["job"]}, value=250000),
    Case("GpuwatchDeadLetteredFrames", "gpuwatch_collector_dead_lettered_frames_total", COLLECTOR, "0 0 0 3x10",
         "0x12", "5m", value=3),
    Case("GpuwatchDeadLettersInDatabase", "gpuwatch_collector_dead_letters_in_database_total", COLLECTOR,
         "0 0 0 4x10", "1x12", "5m", value=4),
    Case("GpuwatchCollectorPartitionStalled", "gpuwatch_collector_partition_stalled_seconds",
         {**COLLECTOR, "partition": "2"}, "0 0 35 95 155 215 275 335", "0 0 35 0 0 0 0 0", "6m", value=275,
         # stalled for one minute so far (the restarted fetch may still clear it)
         extra_quiet=[({**COLLECTOR, "partition": "1"}, "0 0 0 0 0 35 95 155")]),
    Case("GpuwatchGpuUuidConflict", "gpuwatch_collector_gpu_uuid_conflicts_total", COLLECTOR, "0 0 0 1x10", "2x12",
         "5m", value=1),
    Case("GpuwatchKeyframeRequestsFailing", "gpuwatch_collector_keyframe_request_errors_total", COLLECTOR,
         "0 0 0 12x10", "3x12", "5m", value=12),
    Case("GpuwatchCollectorRetryingDatabase", "gpuwatch_collector_db_retries_total", COLLECTOR, "0 0 0+6x20",
         "0 0 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8 8", "12m", value=30,
         # retrying for the last four minutes only (a database restart): not yet five
         extra_quiet=[({**COLLECTOR, "instance": "10.0.1.4:8080"}, "0x7 3 6 9 9x11")]),
    Case("GpuwatchDatabaseUnreachable", "gpuwatch_collector_db_up", COLLECTOR, "1 0x10", "1x12", "4m", value=0),
]


def _series(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _expand(template: str, labels: dict[str, str], value: float) -> str:
    """The two template forms the chart's annotations use: {{ $labels.X }} and {{ $value }}."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), template)
    return text.replace("{{ $value }}", f"{value:g}" if abs(value) < 1e6 else repr(value))


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    rendered = Chart().render(value_set("defaults"))
    groups = rendered.one("PrometheusRule")["spec"]["groups"]
    path = tmp_path_factory.mktemp("rules") / "gpuwatch-rules.yaml"
    path.write_text(json.dumps({"groups": groups}, indent=1))
    by_name = {r["alert"]: r for g in groups for r in g["rules"]}
    return path, by_name


def test_promtool_checks_the_rendered_rules(promtool: str, rules: tuple[Path, dict[str, Any]]) -> None:
    path, _ = rules
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_unit_test(rules: tuple[Path, dict[str, Any]]) -> None:
    _, by_name = rules
    assert set(by_name) == {c.alert for c in CASES}
    for name in ("GpuwatchGpuLost", "GpuwatchXidError", "GpuwatchThermalThrottling", "GpuwatchPowerThrottling",
                 "GpuwatchEccDoubleBitErrors", "GpuwatchAgentDown", "GpuwatchCollectorLagging",
                 "GpuwatchDeadLetteredFrames"):
        assert name in by_name, f"the issue's core alert {name} is missing"


def test_each_alert_fires_on_its_input_and_stays_quiet_otherwise(
    promtool: str, rules: tuple[Path, dict[str, dict[str, Any]]], tmp_path: Path,
) -> None:
    path, by_name = rules
    tests = []
    for case in CASES:
        rule = by_name[case.alert]
        fired = dict(case.alert_labels or {k: v for k, v in case.labels.items() if v})
        fired |= rule.get("labels", {})
        annotations = {k: _expand(v, fired, case.value) for k, v in rule["annotations"].items()}
        quiet_labels = {**case.labels, "UUID": "GPU-quiet"} if "UUID" in case.labels else {
            **case.labels, "instance": "10.9.9.9:1"}
        quiet = [(quiet_labels, case.quiet), *case.extra_quiet]
        context = [{"series": _series(metric, lab), "values": v} for metric, lab, v in case.context]
        tests.append({  # the firing input next to the quiet ones: exactly one alert
            "interval": "1m",
            "input_series": [{"series": _series(case.metric, case.labels), "values": case.firing}] + context
            + ([] if case.alert_labels else [{"series": _series(case.metric, lab), "values": v} for lab, v in quiet]),
            "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert,
                                 "exp_alerts": [{"exp_labels": fired, "exp_annotations": annotations}]}],
        })
        tests.append({  # only the quiet inputs: no alert
            "interval": "1m",
            "input_series": [{"series": _series(case.metric, lab), "values": v} for lab, v in quiet] + context,
            "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": []}],
        })
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(json.dumps({"rule_files": [str(path)], "evaluation_interval": "1m", "tests": tests},
                                    indent=1))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert "SUCCESS" in proc.stdout + proc.stderr
