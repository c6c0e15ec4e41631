"""The API's response and request bodies, as they appear in the OpenAPI document.

Why explicit models: the OpenAPI document is the contract that Schemathesis checks every
answer against, and that clients (the web page, ``gpuwatch top``) are written to.
Times are RFC 3339 strings in objects and epoch seconds in series arrays (compact).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


class HolderOut(BaseModel):
    namespace: str | None
    pod: str | None
    service: str | None
    container: str | None
    used_memory_mib: float | None


class PodOnGpu(BaseModel):
    namespace: str | None
    pod: str | None
    service: str | None
    processes: int = Field(description="the pod's processes on this GPU in the newest sample")
    used_memory_mib: float | None = Field(description="memory of all those processes together (MiB)")


HealthField = Literal["ok", "degraded", "critical", "stale", "no_data"]


class GpuOut(BaseModel):
    gpu: str
    node: str
    gpu_index: int | None = Field(description="position by PCI bus id on the node (nvidia-smi's index)")
    model: str | None
    driver_version: str | None
    pci_bus_id: str | None
    mig_profile: str | None
    parent_gpu: str | None
    first_seen: datetime
    last_seen: datetime
    sample_ts: datetime | None
    sample_age_seconds: float | None = Field(description="age of the newest sample now (null: none stored)")
    stale: bool = Field(description="no sample, or the newest is older than the stale limit (the API's "
                                    "stale_after_seconds)")
    health: HealthField = Field(description=(
        "critical: an open critical anomaly; no_data / stale: no sample, or the newest is older than the "
        "stale limit; degraded: an open warning anomaly; ok: otherwise"))
    reasons: list[str] = Field(description="open anomalies (worst first) and the sample age, as sentences")
    open_anomalies: int = Field(description="open anomalies this token may see")
    open_anomalies_by_severity: dict[str, int]
    metrics: dict[str, float]
    pods: list[PodOnGpu] = Field(description="the pods on the GPU in the newest sample, one entry per pod")
    holders: list[HolderOut] = Field(description="the processes on the GPU in the newest sample")


class GpuList(BaseModel):
    items: list[GpuOut]


class NodeOut(BaseModel):
    node: str
    gpu_count: int
    models: list[str]
    last_seen: datetime
    health: dict[str, int] = Field(description="number of GPUs per health status")
    open_anomalies: int = Field(description="open anomalies of the node's GPUs (the sum of /gpus' counts)")
    open_anomalies_by_severity: dict[str, int]


class NodeList(BaseModel):
    items: list[NodeOut]


class NodeDetail(NodeOut):
    gpus: list[GpuOut]


class SeriesOut(BaseModel):
    gpu: str
    source: Literal["raw", "1m", "1h"]
    step_seconds: float
    start: datetime
    end: datetime
    times: list[float] = Field(description="bucket starts, epoch seconds")
    series: dict[str, list[float | None]] = Field(description="metric key -> one value per time (null: no reading)")


class ServiceGpu(BaseModel):
    gpu: str
    node: str
    model: str | None


class ServiceOut(BaseModel):
    namespace: str | None
    service: str
    pods: list[str]
    gpu_count: int
    gpus: list[ServiceGpu]


class ServiceList(BaseModel):
    items: list[ServiceOut]


class UsageOut(BaseModel):
    """Usage over a period: a step, or the whole range (pods, total). In a step without
    any data every figure is null, so charts show a gap."""

    gpu_seconds: float | None = Field(description="seconds GPUs were held, summed over GPUs (each sample counts "
                                                  "for the time until the GPU's next sample, at most 30 s)")
    running_seconds: float | None = Field(description="seconds in which at least one GPU was held")
    gpus_window_avg: float | None = Field(description="GPUs held on average over the whole period: "
                                                      "gpu_seconds / the period's length")
    gpus_while_running: float | None = Field(description="GPUs held on average while running: "
                                                         "gpu_seconds / running_seconds")
    sm_active: float | None = Field(description="SM active of the GPUs held, averaged over the GPU-seconds held")
    tensor_active: float | None = Field(description="tensor active, averaged over the GPU-seconds held")
    memory_used_mib_while_running: float | None = Field(
        description="memory of all the processes on all the GPUs held, averaged over running_seconds (MiB)")
    energy_kwh: float | None = Field(description="each held GPU's power times the seconds held")
    cost: float | None = Field(description="gpu_seconds / 3600 x price_per_gpu_hour")


class StepOut(UsageOut):
    t: float = Field(description="step start, epoch seconds")


class PodOut(UsageOut):
    namespace: str | None
    pod: str | None


class HistoryOut(BaseModel):
    service: str
    namespace: str | None
    start: datetime
    end: datetime
    step_seconds: float
    range_seconds: float = Field(description="length of the period of the pods' and the total's figures "
                                             "(from the first step's start to end)")
    price_per_gpu_hour: float
    currency: str
    steps: list[StepOut]
    pods: list[PodOut]
    total: UsageOut


class EventOut(BaseModel):
    ts: datetime
    node: str
    gpu: str
    kind: str
    code: int | None
    detail: str


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None


OpaqueId = Annotated[str, Field(description="an opaque id (it reveals nothing about other rows or their number)")]


class ProfileSummary(BaseModel):
    status: str = Field(description="captured (GET /anomalies/{id}/profile has the flame graph), requested (no "
                                    "answer yet) or why not: disabled, not_python, permission_denied, ...")
    reason: str = Field(description="the same in words, with numbers")


class AnomalyOut(BaseModel):
    id: OpaqueId
    fingerprint: str
    kind: str
    severity: str
    gpu: str | None
    node: str | None
    namespace: str | None
    pod: str | None
    service: str | None
    metric: str | None
    start_ts: datetime
    end_ts: datetime | None
    summary: str
    causes: Any
    profile: ProfileSummary | None = Field(
        None, description="its CPU profile (a throughput_drop's): captured, requested, or why there is none; "
                          "null when none was asked for")


class FrameField(BaseModel):
    name: Literal["level", "value", "self", "label"]
    type: Literal["number", "string"]
    config: dict[str, Any]
    values: list[int] | list[str]


class ProfileFrame(BaseModel):
    """A CPU profile as the data frame of Grafana's flame graph panel (nested set, depth first)."""

    name: str
    meta: dict[str, Any] = Field(description="preferredVisualisationType flamegraph; custom: the anomaly id, status, "
                                             "reason, captured_at, samples and each process's pid/status/reason")
    fields: list[FrameField] = Field(description="level, value, self and label as parallel arrays, one entry per "
                                                 "node, depth first from the single root 'total'")


class AnomalyPage(BaseModel):
    items: list[AnomalyOut]
    next_cursor: str | None


class AlertOut(BaseModel):
    id: OpaqueId
    rule: str
    fingerprint: str
    status: str
    severity: str
    namespace: str | None
    service: str | None
    gpu: str | None
    node: str | None
    summary: str
    labels: dict[str, Any]
    starts_at: datetime
    ends_at: datetime | None
    anomaly_id: str | None
    updated_at: datetime


class AlertPage(BaseModel):
    items: list[AlertOut]
    next_cursor: str | None


class SilenceOut(BaseModel):
    id: OpaqueId
    matchers: dict[str, Any]
    starts_at: datetime
    ends_at: datetime
    created_by: str | None = Field(description="the creating token, shown to that token and to admins who may see "
                                               "it; 'redacted' to others")
    comment: str | None
    created_at: datetime


class SilencePage(BaseModel):
    items: list[SilenceOut]
    next_cursor: str | None


class SilenceIn(BaseModel):
    matchers: dict[str, str] = Field(min_length=1, description="label -> value; an alert matches when all match")
    starts_at: datetime | None = None
    ends_at: datetime | None = Field(None, description="end of the silence (default: starts_at + duration)")
    duration_seconds: float | None = Field(None, gt=0, le=366 * 86400)
    comment: str | None = Field(None, max_length=1000)


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str
    role: Literal["viewer", "operator", "admin"]
    namespaces: list[str] | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenList(BaseModel):
    items: list[TokenOut]


class TokenIn(BaseModel):
    role: Literal["viewer", "operator", "admin"]
    namespaces: list[str] | None = Field(None, description="limit the token to these namespaces (none: all)")
    name: str = Field("", max_length=200)


class TokenCreated(TokenOut):
    token: str = Field(description="the token; shown only in this answer")


class MeOut(BaseModel):
    token_id: int
    name: str
    role: Literal["viewer", "operator", "admin"]
    namespaces: list[str] | None


class SettingsOut(BaseModel):
    price_per_gpu_hour: float
    currency: str
    max_points: int
    token_cache_seconds: float
    cors_origins: list[str]
    tls: bool
    stale_after_seconds: float
    metrics_auth: bool
    metrics_per_service: bool


class XidOut(BaseModel):
    code: int
    mnemonic: str = Field(description="NVIDIA's name for the code")
    meaning: str
    severity: str = Field(description="info, warning or critical: the severity of the anomaly it opens")
    action: str = Field(description="what to do about it")
    nvidia_action: str = Field(description="the immediate action in NVIDIA's XID catalog")
    kind: str = Field(description="the anomaly kind it opens (xid, ecc_dbe, gpu_lost)")


class ClockReasonOut(BaseModel):
    bit: int = Field(description="the bit in the clock-event-reasons field (and the code of throttle events)")
    name: str
    meaning: str
    throttles: bool = Field(description="whether the reason holds the clocks below what the load asks for")


class GpuFactsOut(BaseModel):
    xids: list[XidOut]
    clock_event_reasons: list[ClockReasonOut]


class KernelCoverage(BaseModel):
    """What the CUPTI probe recorded of the service in the range (a window is counted in the
    range it starts in)."""

    windows: int = Field(description="recording windows (one process, about 1 s in every period_s)")
    processes: int = Field(description="distinct processes (node, pid) that sent windows")
    pods: int
    nodes: int
    recorded_seconds: float = Field(description="seconds of recording, summed over the windows (so over processes)")
    first: datetime | None = Field(description="start of the first window")
    last: datetime | None = Field(description="end of the last window")
    records: int = Field(description="CUPTI activity records read")
    dropped_records: int = Field(description="records CUPTI dropped or the probe did not read (figures are low "
                                             "by about that many kernels and copies)")


class KernelOut(BaseModel):
    name: str = Field(description="demangled kernel name; '(other kernels)' sums those past the probe's 200 per "
                                  "window")
    category: str = Field(description="gemm, attention, communication, convolution, normalization, reduction, "
                                      "memory, elementwise or other (telemetry/kernels.py's patterns)")
    calls: int
    calls_per_second: float = Field(description="calls per second of recording")
    time_seconds: float = Field(description="GPU time in the kernel, summed over calls")
    share: float = Field(description="of the service's kernel time in the range (0-1)")
    mean_us: float = Field(description="mean duration of one call (µs)")
    p95_us: float = Field(description="the largest of the windows' 95th-percentile durations (µs): an upper "
                                      "bound of the range's p95")
    short_calls: int = Field(description="calls under 10 µs")
    grid: list[int] = Field(description="grid of the window in which the kernel took the most time (x, y, z)")
    block: list[int] = Field(description="block of that window (x, y, z)")
    registers: int = Field(description="registers per thread")
    shared_bytes: int = Field(description="shared memory per block (static + dynamic, bytes)")
    occupancy: float | None = Field(description="theoretical occupancy of that launch shape (0-1; null: unknown "
                                                "GPU or shape)")
    trend: list[float | None] = Field(description="share of each bucket's kernel time, one per bucket (null: no "
                                                  "kernel time in the bucket)")


class KernelBucketOut(BaseModel):
    t: float = Field(description="bucket start, epoch seconds")
    windows: int
    recorded_seconds: float
    kernel_seconds: float
    idle_share: float | None = Field(description="GPU idle share between kernels in the bucket (null: no kernels)")


class CopyOut(BaseModel):
    kind: str = Field(description="HtoD, DtoH, DtoD, HtoH, PtoP or other")
    memory: str = Field(description="host memory: pageable, pinned, device, managed or other")
    calls: int
    bytes: int
    time_seconds: float
    bytes_per_second: float = Field(description="bytes per second of recording")


class CallTotals(BaseModel):
    calls: int
    time_seconds: float = Field(description="CPU time in the calls (memsets: GPU time)")
    calls_per_second: float = Field(description="calls per second of recording")


class GpuTimeOut(BaseModel):
    busy_seconds: float = Field(description="union of the kernels' intervals, summed over devices and windows")
    idle_seconds: float = Field(description="gaps between kernels inside the windows")
    idle_gaps: int = Field(description="gaps of 10 µs or more")
    idle_share: float | None = Field(description="idle / (busy + idle): the GPU's idle share between its first and "
                                                 "last kernel of each window (null: no kernels)")


class KernelHintOut(BaseModel):
    kind: Literal["kernel_fusion", "low_occupancy", "pageable_copies", "sync_heavy", "idle_gpu"]
    severity: Literal["info", "warning"]
    message: str = Field(description="the figure and what to do about it")
    kernels: list[str] = Field(description="the kernels it concerns (none for service-wide hints)")
    value: float = Field(description="the figure that triggered it (a share or a rate per second)")


class KernelsOut(BaseModel):
    """A service's kernel statistics from the opt-in CUPTI probe over a range."""

    service: str
    namespace: str | None
    since: datetime
    until: datetime
    bucket_seconds: float = Field(description="width of the trend buckets (the range in 12)")
    coverage: KernelCoverage
    kernel_seconds: float = Field(description="GPU time in all kernels")
    kernel_names: int = Field(description="distinct kernels (the list has the heaviest 'limit')")
    kernels: list[KernelOut] = Field(description="heaviest first")
    buckets: list[KernelBucketOut] = Field(description="the range in equal buckets, oldest first")
    copies: list[CopyOut] = Field(description="summed by direction and host memory, most bytes first")
    memsets: CallTotals
    syncs: CallTotals = Field(description="synchronisation calls (cudaDeviceSynchronize, stream and event syncs)")
    launches: CallTotals = Field(description="runtime API launch calls (cudaLaunchKernel and kin)")
    gpu: GpuTimeOut
    hints: list[KernelHintOut] = Field(description="what the figures suggest doing, warnings first")


class KernelFrame(BaseModel):
    """A service's kernel time as the data frame of Grafana's flame graph panel (nested set, depth first)."""

    name: str
    meta: dict[str, Any] = Field(description="preferredVisualisationType flamegraph; custom: service, namespace, "
                                             "since, until, unit (µs of kernel time)")
    fields: list[FrameField] = Field(description="level, value, self and label as parallel arrays, one entry per "
                                                 "node, depth first from the single root 'total': "
                                                 "total;service;pod;category;kernel, values in µs of kernel time")
