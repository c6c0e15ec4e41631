"""Per-GPU detector state: what the detectors remember between two records of one GPU.

Why one object per GPU instead of one per detector: a record is looked at by every
detector, and reading the metrics once into a few attributes here keeps the engine
fast enough for replay (tens of thousands of records per second on one core).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collector.detect.anomaly import Anomaly, AnomalyKind
from collector.detect.baseline import RobustBaseline
from collector.detect.evidence import Evidence, Verdict
from collector.detect.finding import Finding
from collector.detect.hbm import HbmFit
from collector.detect.level import ActivityLevel
from telemetry.records import GpuId

if TYPE_CHECKING:
    from collector.detect.general import Watch


@dataclass(slots=True)
class GpuState:
    node: str
    gpu: GpuId
    gpu_index: int | None = None
    last_ts: float = 0.0
    # identity of the workload on this GPU (first process with a pod, else first process)
    pids: frozenset[int] = frozenset()
    pids_since: float = 0.0
    namespace: str | None = None
    pod: str | None = None
    service: str | None = None
    pod_key: str | None = None  # namespace/pod
    service_key: str | None = None  # namespace/service (else the pod's)
    # current readings
    sm: float | None = None
    util: float | None = None  # GPU utilisation, % (kernel resident)
    clock: float | None = None
    temp: float | None = None
    reasons: int = 0
    limit_max: float = 0.0  # the highest power limit seen (W): the GPU's rated limit
    # baselines
    level: ActivityLevel = field(default_factory=lambda: ActivityLevel(0.0))
    clock_base: RobustBaseline = field(default_factory=lambda: RobustBaseline(1800.0))
    cap_clock_base: RobustBaseline = field(default_factory=lambda: RobustBaseline(1800.0))  # at the power cap
    cap_temp_base: RobustBaseline = field(default_factory=lambda: RobustBaseline(1800.0))  # die there (any job)
    temp_base: RobustBaseline = field(default_factory=lambda: RobustBaseline(1800.0))
    slow_ts: float = -1e18  # when the clock and temperature baselines last learned
    sm_rel: float = 1.0  # recent SM activity / own working level, for peers to compare against
    pcie: float = 0.0  # PCIe traffic, bytes/s, both directions (0 where not reported)
    pcie_rx: float = 0.0  # of which host to device (PCIe receive, as DCGM counts it), bytes/s
    pcie_work: float = -1.0  # PCIe traffic at the working level, bytes/s (-1: not learned; launch.learn_traffic)
    pcie_ts: float = -1e18  # when pcie_work last learned
    copy_ts: float = -1e18  # when a copy stage was last seen (activity: a checkpoint's write follows it)
    h2d_since: float = -1.0  # since when a copy has mostly gone host to device without a pause (-1: none)
    dram: float | None = None  # DRAM activity (ratio), where reported
    # launch-bound: slow means of utilisation (ratio 0-1) and SM activity, and when last folded
    util_slow: float = -1.0
    sm_slow: float = 0.0
    launch_ts: float = 0.0
    # (ts, util_slow) every few seconds: how occupied the GPU was before a fall began
    util_hist: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=64))
    # (the fall's start, when it was last judged as occupied as an evaluation: activity.EVAL_LATCH_S)
    occupied_at: tuple[float, float] = (-1.0, -1e18)
    # memory: (ts, used MiB, SM activity or -1 where not read) every few seconds, and the total
    used_hist: deque[tuple[float, float, float]] = field(default_factory=lambda: deque(maxlen=240))
    fb_total: float = 0.0
    # counters: (ts, value) history, thinned
    replay_hist: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=64))
    sbe_hist: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=128))
    sbe_first: tuple[float, float] | None = None  # the first single-bit total seen (or since a reset)
    dbe: float | None = None
    dbe_jump_ts: float = -1e18
    dbe_jump: float = 0.0
    xid: int = 0
    xid_ts: float = -1e18
    leak: Finding | None = None
    sbe_finding: Finding | None = None
    hbm: HbmFit = field(default_factory=HbmFit)  # HBM temperature against its die's and its traffic
    # the general-purpose detector: one watch per metric, and when another anomaly was last open
    watches: dict[str, Watch] = field(default_factory=dict)
    watch_ts: float = -1e18
    other_ts: float = -1e18
    # host and inference-server readings beside the GPU's (issue 14), and the last verdict on a fall
    evidence: Evidence = field(default_factory=Evidence)
    verdict: tuple[float, Verdict] | None = None
    # the host-side cause a reported fall was reported with, and a new one seen since: (since when, cause)
    drop_cause: str | None = None
    new_cause: tuple[float, str] | None = None
    new_cause_at: float = -1e18  # when the evidence was last weighed for a new cause
    # hysteresis: since when each kind's condition holds; open anomalies and when last true
    pending: dict[AnomalyKind, float] = field(default_factory=dict)
    open: dict[AnomalyKind, tuple[Anomaly, float]] = field(default_factory=dict)

    def set_identity(self, namespace: str | None, pod: str | None, service: str | None) -> None:
        self.namespace, self.pod, self.service = namespace, pod, service
        self.pod_key = f"{namespace}/{pod}" if pod else None
        self.service_key = f"{namespace}/{service}" if service else self.pod_key

    def where(self) -> str:
        """How a summary names this GPU: index and node, then pod and service where known."""
        name = f"GPU {self.gpu_index}" if self.gpu_index is not None else f"GPU {self.gpu}"
        text = f"{name} on {self.node}"
        if self.pod:
            text += f" (pod {self.namespace}/{self.pod}"
            text += f", service {self.service})" if self.service else ")"
        return text
