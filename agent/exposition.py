"""``/metrics`` text: dcgm-exporter's names and labels, per-process metrics, the agent's own.

The DCGM families are rendered here rather than through prometheus-client's metric
objects because dcgm-exporter exposes counters without the ``_total`` suffix (e.g.
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), which prometheus-client would rename, and
dashboards such as Grafana 12239 query the names as they are. The agent's own metrics
follow Prometheus conventions and go through a prometheus-client registry.

Rendering happens at scrape time from the latest sample of each GPU, so the sampling
path never touches the exporter. Label prefixes are cached per GPU and owner set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from agent.devices import GpuTarget
from agent.runtime import Agent
from agent.sampler import Identity
from agent.stats import Snapshot, counter, families, gauge, snapshot
from telemetry.catalog import CATALOG
from telemetry.keys import DRIVER_VERSION_LABEL
from telemetry.records import GpuRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MIB = 1 << 20


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return repr(float(value))


Owner = tuple[str, str, str]  # container, namespace, pod


def gpu_labels(t: GpuTarget, node: str, driver_version: str, owner: Owner) -> str:
    """dcgm-exporter's label set for one GPU (and one owning pod, or none)."""
    parts = [
        f'gpu="{t.index}"', f'UUID="{_esc(t.key)}"', f'pci_bus_id="{_esc(t.pci_bus_id)}"',
        f'device="nvidia{t.minor}"', f'modelName="{_esc(t.model)}"', f'Hostname="{_esc(node)}"',
        f'{DRIVER_VERSION_LABEL}="{_esc(driver_version)}"',
    ]
    if t.mig_profile is not None:
        parts += [f'GPU_I_PROFILE="{_esc(t.mig_profile)}"', f'GPU_I_ID="{t.gpu_instance_id}"']
    container, namespace, pod = owner
    parts += [f'container="{_esc(container)}"', f'namespace="{_esc(namespace)}"', f'pod="{_esc(pod)}"']
    return ",".join(parts)


def owners_of(t: GpuTarget, record: GpuRecord | None, allocated: Mapping[str, Sequence[Identity]]) -> list[Owner]:
    """Pods that hold this GPU: from the kubelet's allocation, else from its processes."""
    found: set[Owner] = set()
    for who in allocated.get(t.key, ()):
        if who.pod:
            found.add((who.container or "", who.namespace or "", who.pod))
    if not found and record is not None:
        for p in record.processes:
            if p.pod:
                found.add((p.container or "", p.namespace or "", p.pod))
    return sorted(found) or [("", "", "")]


TransportStats = Callable[[], Sequence[Snapshot]]


class Exposition:
    """Renders the agent's state as Prometheus text.

    ``transport_stats`` gives the snapshots of whatever carries the agent's frames (sender,
    spool, framer, control listener) at each scrape; without a transport there are none."""

    def __init__(self, agent: Agent, transport_stats: TransportStats | None = None) -> None:
        self.agent = agent
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.registry.register(_AgentCollector(agent, transport_stats))
        self._label_cache: dict[tuple[str, Owner], str] = {}

    def _labels(self, t: GpuTarget, owner: Owner) -> str:
        key = (t.key, owner)
        labels = self._label_cache.get(key)
        if labels is None:
            if len(self._label_cache) > 64 * max(1, len(self.agent.targets)):
                self._label_cache.clear()  # pods come and go: keep the cache bounded
            labels = gpu_labels(t, self.agent.node, self.agent.driver_version, owner)
            self._label_cache[key] = labels
        return labels

    def render(self) -> bytes:
        snapshot = self.agent.snapshot()
        allocated = self.agent.owners()
        rows: list[tuple[GpuTarget, GpuRecord | None, list[str]]] = []
        for t, record in snapshot:
            if not t.healthy or record is None:
                continue
            rows.append((t, record, [self._labels(t, o) for o in owners_of(t, record, allocated)]))
        out: list[str] = []
        for m in CATALOG:
            lines = [
                f"{m.key}{{{labels}}} {_fmt(t.last_metrics[m.key])}"
                for t, _record, label_sets in rows if m.key in t.last_metrics
                for labels in label_sets
            ]
            if lines:
                out.append(f"# HELP {m.key} {m.help}\n# TYPE {m.key} {m.kind}\n")
                out.append("\n".join(lines))
                out.append("\n")
        out.extend(_process_families(self.agent.node, rows))
        return "".join(out).encode() + generate_latest(self.registry)


def _process_families(node: str, rows: Sequence[tuple[GpuTarget, GpuRecord | None, list[str]]]) -> Iterator[str]:
    families = (
        ("gpuwatch_process_used_memory_bytes", "Framebuffer memory used by the process (bytes).",
         "used_memory_mib", MIB),
        ("gpuwatch_process_sm_util", "SM utilization of the process (in %).", "sm_util", 1),
        ("gpuwatch_process_mem_util", "Memory (copy) utilization of the process (in %).", "mem_util", 1),
    )
    for name, help_text, attr, scale in families:
        lines = []
        for t, record, _ in rows:
            if record is None:
                continue
            for p in record.processes:
                value = getattr(p, attr)
                if value is None:
                    continue
                labels = (
                    f'gpu="{t.index}",UUID="{_esc(t.key)}",Hostname="{_esc(node)}",pid="{p.pid}",'
                    f'process_name="{_esc(p.name or "")}",namespace="{_esc(p.namespace or "")}",'
                    f'pod="{_esc(p.pod or "")}",container="{_esc(p.container or "")}",service="{_esc(p.service or "")}"'
                )
                lines.append(f"{name}{{{labels}}} {_fmt(value * scale)}")
        if lines:
            yield f"# HELP {name} {help_text}\n# TYPE {name} gauge\n" + "\n".join(lines) + "\n"


@snapshot
class AgentStats:
    """The agent's own unlabelled figures: sampling cost and the CPU budget's state."""

    nvml_seconds_total: float = counter(
        "gpuwatch_agent_nvml_seconds", "Time spent inside NVML calls while sampling (the NVML floor).")
    sampling_cpu_seconds_total: float = counter(
        "gpuwatch_agent_sampling_cpu_seconds", "CPU time of the sampling thread.")
    cpu_budget_ratio: float = gauge("gpuwatch_agent_cpu_budget_ratio", "CPU budget as a fraction of one core.")
    cpu_usage_ratio: float = gauge(
        "gpuwatch_agent_cpu_usage_ratio",
        "CPU use of the agent's sampling threads as a fraction of one core (recent window).")
    interval_stretch: float = gauge(
        "gpuwatch_agent_interval_stretch",
        "Factor the CPU budget applies to every interval (never past the ceiling interval).")
    budget_stretched_samples_total: int = counter(
        "gpuwatch_agent_budget_stretched_samples", "Samples whose next interval the CPU budget lengthened.")
    budget_capped_samples_total: int = counter(
        "gpuwatch_agent_budget_capped_samples",
        "Samples whose next interval the budget would have lengthened past the ceiling (kept at the ceiling).")
    interval_ceiling_seconds: float = gauge(
        "gpuwatch_agent_interval_ceiling_seconds", "Longest interval between two samples of a GPU.")


def agent_stats(a: Agent) -> AgentStats:
    floor_ns = sum(ns for ns, _n in a.sampler.stats.acc.values()) if a.sampler is not None else 0
    return AgentStats(
        nvml_seconds_total=floor_ns * 1e-9, sampling_cpu_seconds_total=a.sample_cpu_seconds,
        cpu_budget_ratio=a.budget.fraction, cpu_usage_ratio=a.budget.usage(), interval_stretch=a.budget.stretch,
        budget_stretched_samples_total=a.budget_stretched_total, budget_capped_samples_total=a.budget_capped_total,
        interval_ceiling_seconds=a.config.ceiling)


class _AgentCollector(Collector):
    """The agent's own health: samples, intervals, call latency, CPU, errors, its transport."""

    def __init__(self, agent: Agent, transport_stats: TransportStats | None) -> None:
        self.agent = agent
        self.transport_stats = transport_stats

    def collect(self) -> Iterable[Metric]:
        a = self.agent
        samples = CounterMetricFamily("gpuwatch_agent_samples", "GPU samples taken.", labels=["UUID"])
        interval = GaugeMetricFamily(
            "gpuwatch_agent_sample_interval_seconds", "Current sampling interval of the GPU.", labels=["UUID"])
        up = GaugeMetricFamily(
            "gpuwatch_agent_gpu_up", "1 if the GPU answers NVML, 0 while it is lost.", labels=["UUID"])
        for key, t in a.targets.items():
            st = a.state[key]
            samples.add_metric([key], st.samples)
            interval.add_metric([key], st.effective_interval)
            up.add_metric([key], 1.0 if t.healthy else 0.0)
        yield from (samples, interval, up)
        call_time = CounterMetricFamily(
            "gpuwatch_agent_nvml_call_seconds", "Time spent in each NVML call while sampling.", labels=["call"])
        call_count = CounterMetricFamily(
            "gpuwatch_agent_nvml_calls", "NVML calls made while sampling.", labels=["call"])
        startup = GaugeMetricFamily(
            "gpuwatch_agent_nvml_call_startup_seconds", "Latency of each NVML call measured at start.", labels=["call"])
        if a.sampler is not None:
            for call, (ns, n) in sorted(a.sampler.stats.acc.items()):
                call_time.add_metric([call], ns * 1e-9)
                call_count.add_metric([call], n)
        for call, seconds in sorted(a.calibration.items()):
            startup.add_metric([call], seconds)
        yield from (call_time, call_count, startup)
        yield from families([agent_stats(a)])
        cpu = CounterMetricFamily(
            "gpuwatch_agent_cpu_seconds",
            "CPU time of the agent's own threads by account: sampling (sampling and XID threads, what "
            "the CPU budget governs), transport (framing, Kafka, spool), http (/metrics requests), profile "
            "(py-spy captures, py-spy's own CPU included; present once profiling is on), inference "
            "(scraping the inference servers of pods that ask for it), kernels (the kernel probe receiver; "
            "present once it runs).",
            labels=["account"])
        for account, seconds in sorted(a.cpu.accounts().items()):
            cpu.add_metric([account], max(0.0, seconds))
        yield cpu
        errors = CounterMetricFamily("gpuwatch_agent_errors", "Errors by kind.", labels=["kind"])
        counts = {"gpu_lost": 0}  # always present, so increase() sees the first one
        counts.update(a.errors)
        if a.sampler is not None:
            for kind, n in a.sampler.errors.items():
                counts[kind] = counts.get(kind, 0) + n
            if a.sampler.host is not None:  # files of the host evidence that could not be read
                for kind, n in a.sampler.host.errors.items():
                    counts[kind] = counts.get(kind, 0) + n
        for kind, n in sorted(counts.items()):
            errors.add_metric([kind], n)
        yield errors
        if self.transport_stats is not None:
            yield from families(self.transport_stats())
        if a.pod_figures is not None:
            yield from families(a.pod_figures.stats())
        info = GaugeMetricFamily(
            "gpuwatch_agent_info",
            "Agent build and driver; agent_instance is the random id of this agent process, also the "
            "'instance' header of its Kafka messages (named so as not to clash with Prometheus' instance).",
            labels=["driver", "driver_version", "Hostname", "agent_instance"])
        info.add_metric([a.driver.kind, a.driver_version, a.node, a.instance], 1.0)
        yield info


