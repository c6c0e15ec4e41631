"""The agent's /metrics against the real tools: promtool's linter, a Prometheus server, Grafana 12239.

One mixed fleet serves every test of this module (a shared agent and one Prometheus keep
the module to a few seconds): an H200, an A100 and a T4, a second H200 in MIG mode with
two instances, and a T4 that the kubelet time-slices between two pods. Waiting is done by
polling with a deadline, never by fixed sleeps, and no assertion depends on timing.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pynvml as nv
import pytest

from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.gpm import GPM_METRICS
from agent.readers import READERS
from agent.runtime import ScheduleConfig
from agent.simulate.attribution import SimIdentity, SimulatedAttribution
from telemetry.catalog import BY_KEY, CATALOG
from tests.support.poll import wait_until

if TYPE_CHECKING:
    from conftest import HttpResponse, PrometheusFactory, PrometheusServer, SimAgent, SimAgentFactory

T = TypeVar("T")

NODE = "gpu-node-7"
JOB = "gpuwatch"
H200, A100, T4 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4"
MODELS = [H200, A100, T4]  # GPU i is MODELS[i % 3]
GPUS = 6  # 0 H200, 1 A100, 2 T4, 3 H200 in MIG mode, 4 A100, 5 T4 shared by two pods
MIG = {3: ["1g.18gb", "3g.71gb"]}
SHARED_GPU = 5
NOTEBOOK = SimIdentity(None, None, "research", "notebook-0", "jupyter")
MIB = 1 << 20

WHOLE_GPUS = frozenset(i for i in range(GPUS) if i not in MIG)  # device-level metrics, one series per pod
HOPPER_GPUS = frozenset(i for i in WHOLE_GPUS if MODELS[i % 3] == H200)  # GPM: DCGM_FI_PROF_*
OLDER_GPUS = frozenset(i for i in range(GPUS) if MODELS[i % 3] != H200)  # no GPM, never DCGM_FI_PROF_*

# Labels of every DCGM_FI_* series of a GPU, as dcgm-exporter names them (MIG adds GPU_I_*).
DCGM_LABELS = frozenset({
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
    "container", "namespace", "pod",
})
MIG_LABELS = frozenset({"GPU_I_PROFILE", "GPU_I_ID"})
OWNER_LABELS = frozenset({"container", "namespace", "pod"})  # empty (so absent in Prometheus) without a pod


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _eventually(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    return wait_until(probe, timeout=timeout, what=what, interval=0.05)


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Exposed:
    """The text exposition, parsed as written (no ``_total`` renaming, unlike prometheus_client's parser)."""

    helps: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    repeated_metadata: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Exposed:
        out = cls()
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                _, kind, name, rest = [*line.split(" ", 3), ""][:4]
                table = out.helps if kind == "HELP" else out.types
                if name in table:
                    out.repeated_metadata.append(line)
                table[name] = rest
                continue
            if line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            assert m is not None, f"unparsable sample line: {line!r}"
            labels: dict[str, str] = {}
            raw = m["labels"] or ""
            pos = 0
            while pos < len(raw):
                lm = _LABEL.match(raw, pos)
                assert lm is not None, f"unparsable labels in {line!r}"
                labels[lm[1]] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e[0]], lm[2])
                pos = lm.end()
            out.samples.append(Sample(m["name"], labels, float(m["value"])))
        return out

    def names_for(self, uuid: str) -> set[str]:
        return {s.name for s in self.samples if s.labels.get("UUID") == uuid}


def _uuid(sim: SimAgent, index: int) -> str:
    return sim.fleet.uuid(sim.fleet.handle_by_index(index))


def _labels(result: Iterable[dict[str, Any]], label: str) -> set[str]:
    return {r["metric"].get(label, "") for r in result}


def _values(result: Iterable[dict[str, Any]]) -> list[float]:
    return [float(r["value"][1]) for r in result]


def supported_keys(model: str) -> set[str]:
    """Catalog keys the simulated driver answers for a whole GPU of ``model``.

    Probed on a fresh fleet through the driver itself (each reader once, and GPM between
    two samples one fake second apart), so the expectation does not come from the agent
    code under test. XID is an event metric: every GPU reports it (0 until an XID).
    """
    now = [0.0]
    fleet = SimulatedFleet(1, models=[model], clock=lambda: now[0], start=0.0)
    fleet.init()
    h = fleet.handle_by_index(0)
    keys: set[str] = set()
    for reader in READERS.values():
        out: dict[str, float] = {}
        try:
            reader(fleet, h, out)
        except nv.NVMLError_NotSupported:
            continue
        keys.update(out)
    if fleet.gpm_supported(h):
        key_of = {metric_id: key for key, metric_id in GPM_METRICS.items()}
        first, second = fleet.gpm_alloc(), fleet.gpm_alloc()
        fleet.gpm_sample(h, first)
        now[0] = 1.0
        fleet.gpm_sample(h, second)
        keys.update(key_of[i] for i in fleet.gpm_metrics(first, second, tuple(key_of)))
    keys.update(m.key for m in CATALOG if m.cost == "event")
    return keys


class TimeSlicedAttribution(SimulatedAttribution):
    """The kubelet gave the shared GPU to two pods (time-slicing): its workload's and an idle notebook's."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        super().__init__(fleet)
        workload = fleet.processes(SHARED_GPU)[0]
        owner = SimIdentity(None, None, workload.namespace, workload.pod, workload.container)
        self.shared = {fleet.uuid(fleet.handle_by_index(SHARED_GPU)): [owner, NOTEBOOK]}

    def gpu_owners(self) -> dict[str, list[SimIdentity]]:
        return self.shared


def _expected_pods(sim: SimAgent, index: int) -> set[str]:
    """Pods a whole GPU's series are labelled with: the kubelet's owners, else its processes' pods."""
    pods = {p.pod for p in sim.fleet.processes(index)}
    return pods | {NOTEBOOK.pod or ""} if index == SHARED_GPU else pods


# --------------------------------------------------------------------------------------
# fixtures: one fleet, one Prometheus for the module
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(module_sim_agent: SimAgentFactory) -> SimAgent:
    sim: SimAgent = module_sim_agent(
        GPUS, node=NODE, models=MODELS, mig=MIG, attribution=TimeSlicedAttribution,
        # a whole core of budget: intervals never stretch, so a test never waits long
        config=ScheduleConfig(floor=0.25, ceiling=1.0, busy=0.5, cpu_budget=1.0),
    )
    # warm: every target sampled twice, so GPM (two samples >= 100 ms apart) has reported
    _eventually(lambda: all(st.samples >= 2 for st in sim.agent.state.values()),
                timeout=15, what="two samples of every GPU")
    return sim


@pytest.fixture(scope="module")
def prometheus(fleet: SimAgent, module_prometheus_server: PrometheusFactory) -> PrometheusServer:
    prom = module_prometheus_server([fleet.target], job=JOB, scrape_interval="1s")
    prom.wait_for(f'up{{job="{JOB}"}} == 1')
    return prom


@pytest.fixture(scope="module")
def exposed(fleet: SimAgent) -> Exposed:
    return Exposed.parse(fleet.metrics())


# --------------------------------------------------------------------------------------
# promtool
# --------------------------------------------------------------------------------------

# promtool 2.42 `check metrics` prints one "<metric> <problem>" line per problem on stderr
# and exits 3 when it found only lint problems (1 on a parse error). These are the only
# problems dcgm-exporter's own naming causes, and so the only ones allowed, and only for
# DCGM_FI_* metrics of the catalog:
CAMEL_LABEL = "label names should be written in 'snake_case' not 'camelCase'"  # modelName (one per series)
NO_TOTAL = 'counter metrics should have "_total" suffix'  # DCGM counters keep DCGM's names
TYPE_IN_NAME = "metric name should not include type 'counter'"  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
# promlint's camelCase rule is the regexp [a-z][A-Z]: of dcgm-exporter's labels only modelName
# matches it (UUID, Hostname, DCGM_FI_DRIVER_VERSION, GPU_I_PROFILE, GPU_I_ID do not), and
# upper-case metric names such as DCGM_FI_DEV_GPU_UTIL are not flagged at all.
DCGM_CAMEL_LABELS = frozenset({"modelName"})


def _lint_allowed(metric: str, problem: str) -> bool:
    row = BY_KEY.get(metric)
    if row is None:  # only DCGM_FI_* catalog metrics may draw complaints
        return False
    if problem == CAMEL_LABEL:
        return True
    if problem == NO_TOTAL:
        return row.kind == "counter"
    if problem == TYPE_IN_NAME:
        return row.kind == "counter" and "COUNTER" in metric
    return False


def test_promtool_lints_only_dcgm_exporter_naming(promtool: str, fleet: SimAgent) -> None:
    text = fleet.metrics()
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    output = (proc.stdout + proc.stderr).decode()
    lines = [line for line in output.splitlines() if line.strip()]
    print(f"promtool check metrics exited {proc.returncode}:\n{output}")  # shown when the test fails
    assert "error while linting" not in output, f"promtool could not parse /metrics:\n{output}"
    assert proc.returncode in (0, 3), f"promtool exit {proc.returncode}:\n{output}"
    assert (proc.returncode == 3) == bool(lines), output

    unexpected = []
    for line in lines:
        metric, _, problem = line.partition(" ")
        if not _lint_allowed(metric, problem):
            unexpected.append(line)
    assert not unexpected, "promtool complaints not caused by dcgm-exporter's naming:\n" + "\n".join(unexpected)

    camel = {name for s in Exposed.parse(text).samples for name in s.labels if re.search("[a-z][A-Z]", name)}
    assert camel <= DCGM_CAMEL_LABELS, f"camelCase labels beyond dcgm-exporter's: {sorted(camel - DCGM_CAMEL_LABELS)}"


# --------------------------------------------------------------------------------------
# the text itself: catalog types and help, absent (never 0) when unsupported
# --------------------------------------------------------------------------------------


def test_every_metric_the_h200_supports_is_exported_with_catalog_type_and_help(
    fleet: SimAgent, exposed: Exposed,
) -> None:
    expected = supported_keys(H200)
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_XID_ERRORS"} <= expected  # the probe itself works

    h200 = _uuid(fleet, min(HOPPER_GPUS))
    exported = {n for n in exposed.names_for(h200) if n.startswith("DCGM_FI_")}
    assert exported == expected, (
        f"missing: {sorted(expected - exported)}; not supported but exported: {sorted(exported - expected)}")
    for key in sorted(expected):
        assert exposed.types.get(key) == BY_KEY[key].kind, f"TYPE of {key}"
        assert exposed.helps.get(key) == BY_KEY[key].help, f"HELP of {key}"

    # every DCGM family on the page is a catalog row, declared once, with the catalog's type and help
    assert not exposed.repeated_metadata
    dcgm = {s.name for s in exposed.samples if s.name.startswith("DCGM_FI_")}
    assert dcgm <= set(BY_KEY), sorted(dcgm - set(BY_KEY))
    for name in dcgm:
        assert exposed.types.get(name) == BY_KEY[name].kind, f"TYPE of {name}"
        assert exposed.helps.get(name) == BY_KEY[name].help, f"HELP of {name}"


def test_a100_and_t4_have_no_profiling_series(fleet: SimAgent, exposed: Exposed) -> None:
    for index in sorted(OLDER_GPUS):
        names = exposed.names_for(_uuid(fleet, index))
        assert "DCGM_FI_DEV_GPU_UTIL" in names, f"GPU {index} is not exported at all"
        prof = sorted(n for n in names if n.startswith("DCGM_FI_PROF_"))
        assert not prof, f"GPU {index} ({MODELS[index % 3]}) has no GPM, yet exports {prof}"


def test_t4_has_no_memory_temperature(fleet: SimAgent, exposed: Exposed) -> None:
    for index in sorted(i for i in WHOLE_GPUS if MODELS[i % 3] == T4):
        names = exposed.names_for(_uuid(fleet, index))
        assert "DCGM_FI_DEV_GPU_TEMP" in names
        assert "DCGM_FI_DEV_MEMORY_TEMP" not in names
    for index in sorted(i for i in WHOLE_GPUS if MODELS[i % 3] != T4):
        assert "DCGM_FI_DEV_MEMORY_TEMP" in exposed.names_for(_uuid(fleet, index))


# --------------------------------------------------------------------------------------
# a real Prometheus scraping the agent
# --------------------------------------------------------------------------------------


def test_prometheus_scrapes_the_agent(prometheus: PrometheusServer, fleet: SimAgent) -> None:
    up = prometheus.query(f'up{{job="{JOB}"}} == 1')
    assert _labels(up, "instance") == {fleet.target}
    samples = prometheus.wait_for(f'scrape_samples_scraped{{job="{JOB}"}} > 0')
    assert _values(samples)[0] > 100


def test_gpu_util_has_one_series_per_gpu_and_owning_pod(prometheus: PrometheusServer, fleet: SimAgent) -> None:
    expected = {_uuid(fleet, i): _expected_pods(fleet, i) for i in sorted(WHOLE_GPUS)}
    assert len(expected[_uuid(fleet, SHARED_GPU)]) == 2
    count = sum(len(p) for p in expected.values())
    result = prometheus.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{job="{JOB}"}}', lambda r: len(r) >= count)

    got: dict[str, set[str]] = {}
    for r in result:
        labels = r["metric"]
        got.setdefault(labels["UUID"], set()).add(labels["pod"])
        assert set(labels) == DCGM_LABELS | {"__name__", "job", "instance"}, sorted(labels)
        index = int(labels["gpu"])
        assert labels["UUID"] == _uuid(fleet, index)
        assert labels["device"] == f"nvidia{index}"
        assert labels["modelName"] == MODELS[index % 3]
        assert labels["Hostname"] == NODE
        assert labels["DCGM_FI_DRIVER_VERSION"] == fleet.fleet.driver_version()
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", labels["pci_bus_id"]), labels["pci_bus_id"]
        assert labels["namespace"] and labels["container"], labels
        assert 0 <= float(r["value"][1]) <= 100
    assert got == expected  # MIG instances and GPUs in MIG mode have no GPU_UTIL, as with dcgm-exporter
    assert len(result) == count
    assert Counter(_labels(result, "gpu")) == Counter(str(i) for i in WHOLE_GPUS)


def test_mig_instances_are_labelled_with_profile_and_instance_id(prometheus: PrometheusServer) -> None:
    (index, profiles), = MIG.items()
    result = prometheus.wait_for(f'DCGM_FI_DEV_FB_USED{{job="{JOB}", GPU_I_ID!=""}}')
    assert {(r["metric"]["gpu"], r["metric"]["GPU_I_ID"], r["metric"]["GPU_I_PROFILE"]) for r in result} == {
        (str(index), str(i + 1), profile) for i, profile in enumerate(profiles)}
    for r in result:  # no pod holds them: Prometheus drops the empty container/namespace/pod labels
        assert set(r["metric"]) == DCGM_LABELS - OWNER_LABELS | MIG_LABELS | {"__name__", "job", "instance"}
        assert r["metric"]["UUID"].startswith("MIG-")


# Grafana dashboard 12239, "NVIDIA DCGM Exporter Dashboard" (published from NVIDIA/dcgm-exporter's
# grafana/dcgm-exporter-dashboard.json), panel queries verbatim. Each row: revision, panel title,
# expression, the GPUs that must appear in the result (None: a single aggregated value) and
# the range its values must lie in.
Panel = tuple[str, str, str, frozenset[int] | None, tuple[float, float]]
HZ = (1e8, 1e10)  # clocks in MHz * 1000000
CELSIUS = (0.0, 120.0)
WATTS = (1.0, 10_000.0)
MIB_RANGE = (0.0, 1e7)
RATIO = (0.0, 1.0)
DASHBOARD_12239: list[Panel] = [
    # revision 1 (2020, Grafana 6.7): variables $instance = label_values(DCGM_FI_DEV_GPU_TEMP, instance),
    # $gpu = label_values(DCGM_FI_DEV_GPU_TEMP, gpu)
    ("rev1", "GPU Temperature", 'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}', WHOLE_GPUS, CELSIUS),
    ("rev1", "GPU Avg. Temp", 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})', None, CELSIUS),
    ("rev1", "GPU Power Usage", 'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}', WHOLE_GPUS, WATTS),
    ("rev1", "GPU Power Total", 'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})', None, WATTS),
    ("rev1", "GPU SM Clocks", 'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000', WHOLE_GPUS, HZ),
    ("rev1", "GPU Utilization", 'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}', WHOLE_GPUS, (0, 100)),
    ("rev1", "GPU Framebuffer Mem Used", 'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}',
     WHOLE_GPUS, MIB_RANGE),
    ("rev1", "Tensor Core Utilization", 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}',
     HOPPER_GPUS, RATIO),
    # current revision (Grafana 9): $Hostname = label_values(DCGM_FI_DEV_FB_FREE, Hostname),
    # $gpu = label_values(DCGM_FI_DEV_FB_FREE{Hostname=~"$Hostname"}, gpu)
    ("current", "GPU Temperature",
     'max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)', WHOLE_GPUS, CELSIUS),
    ("current", "GPU Avg. Temp", 'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})', None, CELSIUS),
    ("current", "GPU Power Usage",
     'max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)', WHOLE_GPUS, WATTS),
    ("current", "GPU Power Total",
     'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (gpu))', None, WATTS),
    ("current", "GPU SM Clocks",
     'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~"$Hostname", gpu=~"$gpu"} * 1000000) by (Hostname, UUID, gpu)',
     WHOLE_GPUS, HZ),
    ("current", "GPU Utilization",
     'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"})'
     " by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)", HOPPER_GPUS, RATIO),
    ("current", "Tensor Core Utilization",
     'max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"})'
     " by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)", HOPPER_GPUS, RATIO),
    ("current", "GPU Framebuffer Mem Used",
     'max(DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
     frozenset(range(GPUS)), MIB_RANGE),
    # not panels of 12239, but what its users commonly add
    ("extra", "temperature per GPU", "avg by (Hostname, gpu, UUID) (DCGM_FI_DEV_GPU_TEMP)", WHOLE_GPUS, CELSIUS),
    ("extra", "memory clock", "DCGM_FI_DEV_MEM_CLOCK * 1000000", WHOLE_GPUS, HZ),
    ("extra", "framebuffer free", "DCGM_FI_DEV_FB_FREE", frozenset(range(GPUS)), MIB_RANGE),
    ("extra", "energy rate (mJ/s)", "sum(rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m]))", None, (1.0, 1e8)),
]


def _grafana_all(values: Iterable[str]) -> str:
    """A multi-value variable set to All, as Grafana interpolates it into a PromQL regex string."""
    escaped = [re.sub(r"([$^*{}\[\]'+?.()|])", r"\\\\\1", v.replace("\\", "\\\\\\\\")) for v in sorted(values)]
    return "(" + "|".join(escaped) + ")"


@pytest.fixture(scope="module")
def dashboard_variables(prometheus: PrometheusServer, fleet: SimAgent) -> dict[str, dict[str, str]]:
    # wait until a scrape carries GPM values and every GPU, then resolve the variables as Grafana does
    prometheus.wait_for(f'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{job="{JOB}"}}')
    prometheus.wait_for(f'count(DCGM_FI_DEV_FB_FREE{{job="{JOB}"}}) >= {GPUS}')
    instances = prometheus.label_values("instance", "DCGM_FI_DEV_GPU_TEMP")
    assert instances == [fleet.target]
    rev1_gpus = prometheus.label_values("gpu", "DCGM_FI_DEV_GPU_TEMP")
    hostnames = prometheus.label_values("Hostname", "DCGM_FI_DEV_FB_FREE")
    assert hostnames == [NODE]
    hostname = _grafana_all(hostnames)
    current_gpus = prometheus.label_values("gpu", f'DCGM_FI_DEV_FB_FREE{{Hostname=~"{hostname}"}}')
    assert set(current_gpus) == {str(i) for i in range(GPUS)}
    return {
        "rev1": {"$instance": _grafana_all(instances), "$gpu": _grafana_all(rev1_gpus)},
        "current": {"$Hostname": hostname, "$gpu": _grafana_all(current_gpus)},
        "extra": {},
    }


@pytest.mark.parametrize(
    ("revision", "title", "expr", "gpus", "value_range"), DASHBOARD_12239,
    ids=[f"{rev}:{title}" for rev, title, *_ in DASHBOARD_12239],
)
def test_grafana_12239_panel_queries(
    prometheus: PrometheusServer, dashboard_variables: dict[str, dict[str, str]],
    revision: str, title: str, expr: str, gpus: frozenset[int] | None, value_range: tuple[float, float],
) -> None:
    for name, value in dashboard_variables[revision].items():
        expr = expr.replace(name, value)
    lo, hi = value_range

    def acceptable(result: list[dict[str, Any]]) -> bool:
        if gpus is None:
            return len(result) == 1 and lo <= _values(result)[0] <= hi
        return {str(i) for i in gpus} <= _labels(result, "gpu")

    result = prometheus.wait_for(expr, acceptable, timeout=15)
    for v in _values(result):
        assert math.isfinite(v) and lo <= v <= hi, f"{title}: {v} outside {value_range} in {result}"
    if gpus is not None and gpus <= HOPPER_GPUS:  # profiling panels: the A100 and T4 are absent
        assert not _labels(result, "gpu") & {str(i) for i in OLDER_GPUS}, result
    if title == "GPU Framebuffer Mem Used" and revision == "current":  # one line per MIG instance
        (index, profiles), = MIG.items()
        ids = {r["metric"].get("GPU_I_ID", "") for r in result if r["metric"]["gpu"] == str(index)}
        assert ids == {""} | {str(i + 1) for i in range(len(profiles))}


def test_older_gpus_are_absent_from_profiling_metrics_in_prometheus(prometheus: PrometheusServer) -> None:
    prometheus.wait_for(f'count({{__name__=~"DCGM_FI_PROF_.+", job="{JOB}", modelName="{H200}"}}) > 0')
    for model in (A100, T4):
        assert prometheus.query(f'{{__name__=~"DCGM_FI_PROF_.+", job="{JOB}", modelName="{model}"}}') == []
    prometheus.wait_for(f'DCGM_FI_DEV_MEMORY_TEMP{{job="{JOB}", modelName="{A100}"}}')
    assert prometheus.query(f'DCGM_FI_DEV_MEMORY_TEMP{{job="{JOB}", modelName="{T4}"}}') == []


def test_per_process_memory_carries_pod_namespace_and_service(prometheus: PrometheusServer, fleet: SimAgent) -> None:
    expected = {
        (_uuid(fleet, i), str(p.pid)): p for i in range(GPUS) for p in fleet.fleet.processes(i)
    }
    assert len(expected) >= 5
    result = prometheus.wait_for(
        f'gpuwatch_process_used_memory_bytes{{job="{JOB}"}}',
        lambda r: {(x["metric"]["UUID"], x["metric"]["pid"]) for x in r} >= set(expected),
    )
    for r in result:
        labels = r["metric"]
        assert labels["pod"] and labels["namespace"] and labels["service"], labels
        p = expected.get((labels["UUID"], labels["pid"]))
        assert p is not None, f"unexpected process series {labels}"
        assert (labels["pod"], labels["namespace"], labels["service"], labels["container"], labels["process_name"]) == (
            p.pod, p.namespace, p.service, p.container, p.name)
        assert labels["Hostname"] == NODE
        assert float(r["value"][1]) == p.used_mib * MIB  # bytes, not MiB


def test_agent_self_metrics(prometheus: PrometheusServer, fleet: SimAgent, exposed: Exposed) -> None:
    targets = set(fleet.agent.targets)
    samples = prometheus.wait_for(
        f'gpuwatch_agent_samples_total{{job="{JOB}"}}', lambda r: _labels(r, "UUID") == targets)
    assert all(v >= 1 for v in _values(samples))
    intervals = prometheus.query(f'gpuwatch_agent_sample_interval_seconds{{job="{JOB}"}}')
    assert _labels(intervals, "UUID") == targets
    assert all(math.isfinite(v) and v > 0 for v in _values(intervals))
    # per-call NVML time: a gauge (moving average) or a counter (_total) of the family gpuwatch_agent_nvml_call_seconds
    calls = prometheus.query(f'{{__name__=~"gpuwatch_agent_nvml_call_seconds(_total)?", job="{JOB}"}}')
    assert {"memory", "power", "utilization"} <= _labels(calls, "call")
    assert all(math.isfinite(v) and v >= 0 for v in _values(calls))
    assert len(prometheus.query(f'process_cpu_seconds_total{{job="{JOB}"}}')) == 1
    assert exposed.types["gpuwatch_agent_errors_total"] == "counter"


def test_an_xid_shows_in_the_dcgm_metric_and_the_error_counter(prometheus: PrometheusServer, fleet: SimAgent) -> None:
    index = min(HOPPER_GPUS)
    fleet.fleet.inject_xid(index, 13)  # graphics engine exception: reported, the GPU stays up
    prometheus.wait_for(f'DCGM_FI_DEV_XID_ERRORS{{job="{JOB}", gpu="{index}"}} == 13')
    errors = prometheus.wait_for(f'gpuwatch_agent_errors_total{{job="{JOB}", kind="xid_13"}} >= 1')
    assert len(errors) == 1


# --------------------------------------------------------------------------------------
# probes
# --------------------------------------------------------------------------------------


def test_health_readiness_and_unknown_paths(sim_agent: SimAgentFactory) -> None:
    sim: SimAgent = sim_agent(2, start_sampling=False)
    health = sim.get("/healthz")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    assert health.content_type == "application/json"
    before = sim.get("/readyz")
    assert before.status == 503 and before.json()["status"] == "not ready"

    sim.agent.start()

    def readyz_ok() -> HttpResponse | None:
        r = sim.get("/readyz")
        return r if r.status == 200 else None

    ready = _eventually(readyz_ok, timeout=10, what="/readyz 200 after the first samples")
    assert ready.json() == {"status": "ready", "gpus": 2}
    metrics = sim.get("/metrics?format=text")
    assert metrics.status == 200 and metrics.content_type.startswith("text/plain; version=0.0.4")
    assert "DCGM_FI_DEV_GPU_UTIL{" in metrics.text

    missing = sim.get("/no/such/path")
    assert missing.status == 404
    assert missing.content_type == "application/json"
    assert "/no/such/path" in missing.json()["error"]


def test_every_transport_counter_reaches_metrics_and_lints(
    promtool: str, sim_agent: SimAgentFactory, tmp_path: Path,
) -> None:
    """Each counter of the sender, spool, framer and control listener is a field of a snapshot class
    that declares its metric; all of them are on /metrics (rejected messages, spool write errors and
    corruption used to be counted and never shown), with the agent's instance and CPU by account."""
    from agent.control import ControlListener, ControlStats
    from agent.framing import Framer, FramerStats
    from agent.kafka_settings import KafkaSettings
    from agent.sender import Sender, SenderStats
    from agent.spool import SpoolStats
    from agent.stats import metric_names

    sim = sim_agent(2)
    agent = sim.agent
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    sender = Sender(kafka, tmp_path / "spool", cpu=agent.cpu)
    try:
        framer = Framer(sender.submit, node=agent.node, instance=agent.instance, cpu=agent.cpu)
        control = ControlListener(kafka, agent.node, agent.instance, framer.request_keyframe, cpu=agent.cpu)
        text = Exposition(agent, lambda: (*sender.snapshots(), framer.stats(), control.stats())).render().decode()
    finally:
        sender.stop()
    exposed = Exposed.parse(text)
    for cls in (SenderStats, SpoolStats, FramerStats, ControlStats):
        for name in metric_names(cls):
            assert any(s.name == name for s in exposed.samples), f"{name} ({cls.__name__}) is not on /metrics"
    info = next(s for s in exposed.samples if s.name == "gpuwatch_agent_info")
    assert info.labels["agent_instance"] == agent.instance and len(agent.instance) == 16
    accounts = {s.labels["account"] for s in exposed.samples if s.name == "gpuwatch_agent_cpu_seconds_total"}
    assert accounts == {"sampling", "transport", "http", "inference"}
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    complaints = [line for line in (proc.stdout + proc.stderr).decode().splitlines() if "gpuwatch_" in line]
    assert not complaints, complaints


def test_every_row_of_the_agents_own_metrics_table_is_on_metrics(sim_agent: SimAgentFactory, tmp_path: Path) -> None:
    """Every field of every snapshot class (the table :func:`agent.stats.rows`) reaches /metrics under a
    name no other field uses; a field declared without counter() or gauge() fails when its class is made."""
    import agent.exposition
    from agent.control import ControlListener
    from agent.framing import Framer
    from agent.inference.scraper import InferenceScraper
    from agent.kafka_settings import KafkaSettings
    from agent.kernels import KernelReceiverStats
    from agent.profiling import ProfileConfig, Profiler
    from agent.sender import Sender
    from agent.stats import rows, snapshot

    table = rows()
    assert {r.source.split(".")[0] for r in table} >= {
        "SenderStats", "SpoolStats", "FramerStats", "ControlStats", "AgentStats", "ProfilerStats", "ScrapeStats",
        "KernelReceiverStats"}
    assert agent.exposition.AgentStats.__name__ == "AgentStats"
    names = [r.name for r in table]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    sim = sim_agent(1)
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    sender = Sender(kafka, tmp_path / "spool", cpu=sim.agent.cpu)
    try:
        framer = Framer(sender.submit, node=sim.agent.node, instance=sim.agent.instance, cpu=sim.agent.cpu)
        control = ControlListener(kafka, sim.agent.node, sim.agent.instance, framer.request_keyframe,
                                  cpu=sim.agent.cpu)
        profiler = Profiler(ProfileConfig(), sim.agent.node, sim.agent.instance, sender.submit)
        scraper = InferenceScraper(list, dict, cpu=sim.agent.cpu)  # its figures, as an agent in Kubernetes has them
        exposition = Exposition(sim.agent, lambda: (*sender.snapshots(), framer.stats(), control.stats(),
                                                    profiler.stats(), *scraper.stats(),
                                                    KernelReceiverStats()))  # what Sending.stats adds
        exposed = Exposed.parse(exposition.render().decode())
    finally:
        sender.stop()
    for row in table:
        found = [s for s in exposed.samples if s.name == row.name]
        assert found, f"{row.name} ({row.source}) is not on /metrics"
    with pytest.raises(TypeError, match="would never reach /metrics"):
        @snapshot
        class Forgotten:
            dropped_total: int = 0


# --------------------------------------------------------------------------------------
# host evidence (issue 14): catalog rows of cost "host", with the GPU's labels
# --------------------------------------------------------------------------------------


def test_host_evidence_is_exported_with_catalog_type_help_and_gpu_labels(promtool: str, tmp_path: Path) -> None:
    from agent.host import HostReader
    from agent.runtime import Agent
    from telemetry.catalog import HOST_KEYS
    from tests.support.hostfs import write_cgroup_v2, write_node, write_process

    now, clock = [1000.0], [0.0]
    sim = SimulatedFleet(2, clock=lambda: now[0], start=0.0)
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    agent = Agent(sim, NODE, ScheduleConfig(), clock=lambda: now[0], calibrate_calls=False,
                  host=HostReader(str(proc), str(cg), clock=lambda: clock[0]))
    agent.open()
    pids = [p.pid for t in agent.targets.values() for p in sim.compute_processes(t.handle)]
    for tick in range(2):
        for pid in pids:
            write_process(proc, pid, utime=50 * tick, stime=0, cgroup=f"0::/pod{pid}\n",
                          threads={pid: ("S", tick * 5 * 10**8, tick * 10**8)})
            write_cgroup_v2(cg, f"/pod{pid}", usage_us=tick * 5 * 10**5, periods=10 * tick, throttled=tick)
        write_node(proc, idle=100 + tick, busy=100 + tick, psi_us={r: tick * 1000 for r in ("cpu", "memory", "io")})
        for key in list(agent.targets):
            agent.queue.put(key, now[0])  # every GPU due now: one tick
        agent.step(now[0])
        now[0] += 1.0
        clock[0] += 1.0
    text = Exposition(agent).render().decode()
    exposed = Exposed.parse(text)
    for key in HOST_KEYS:
        assert exposed.types.get(key) == "gauge", key
        assert exposed.helps.get(key) == BY_KEY[key].help, key
        series = [s for s in exposed.samples if s.name == key]
        assert {s.labels["UUID"] for s in series} == set(agent.targets), key
        assert all(set(s.labels) >= DCGM_LABELS for s in series), key
    cores = {s.labels["UUID"]: s.value for s in exposed.samples if s.name == "gpuwatch_process_cpu_cores"}
    assert all(v == pytest.approx(0.5 * len(sim.compute_processes(agent.targets[u].handle))) for u, v in cores.items())
    done = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).decode().splitlines() if line.strip()]
    assert not [p for p in problems if p.split(" ", 1)[0] in HOST_KEYS and CAMEL_LABEL not in p], problems
