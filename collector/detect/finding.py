"""A detector's verdict on one record, before hysteresis turns it into an :class:`Anomaly`.

Why separate from Anomaly: detectors say "the condition holds now, and here is why";
only the engine decides, from how long it has held, whether that is an anomaly yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from collector.detect.anomaly import AnomalyKind, Severity
from telemetry.keys import DRAM_ACTIVE, INFERENCE_QUEUE_SECONDS, INFERENCE_TTFT_SECONDS, MEMORY_TEMP, POWER_USAGE


@dataclass(slots=True)
class Finding:
    kind: AnomalyKind
    severity: Severity
    metric: str | None
    summary: str
    causes: list[str] = field(default_factory=list)
    hold: float = 0.0  # seconds the condition must persist before it opens an anomaly


Direction = Literal["up", "down", "both"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric watched by the general-purpose detector (collector/detect/general.py)."""

    metric: str  # DCGM field name
    lo: float  # the range its bins span (values outside it are novel by definition)
    hi: float
    every_s: float = 60.0  # one value per this long: the mean of the samples in it
    threshold: float = 0.9  # the detector's score (0-1) that makes an anomaly
    probation_s: float = 1800.0  # learned first (minutes at work, outside other anomalies), never judged
    at_plateau: bool = True  # only samples of a steady workload at its working level (the same load)
    min_change: float = 0.0  # and only a value at least this far outside the range seen so far
    direction: Direction = "both"  # which side of that range is news: "up", "down" or "both"


# Power, temperatures and latencies are reported only above what was seen ("up"). Below it is no
# fault of the GPU: "the same load" is a band (a plateau's samples within 15% of its level), and a job
# that resumes 12% slower after a checkpoint draws 10% less power; a GPU back at work after a pause
# runs cooler for minutes while its heatsink and HBM warm up again (an independently written fleet:
# 12 of the general detector's findings on 12 traces, all false, were power or HBM temperature below
# the range, 7 of them one 8-GPU pod's after its checkpoint; none was above it). Memory bandwidth
# moves either way with the mix of work, so both sides of it are news.
DEFAULT_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(POWER_USAGE, 0.0, 1000.0, min_change=50.0, direction="up"),
    MetricSpec(MEMORY_TEMP, 0.0, 110.0, min_change=5.0, direction="up"),
    MetricSpec(DRAM_ACTIVE, 0.0, 1.0, min_change=0.1),
    # an inference server's own latencies (issue 14's scrape): a serving workload moves with its
    # traffic, so all its samples count, and only a second beyond the worst it has shown is news
    MetricSpec(INFERENCE_TTFT_SECONDS, 0.0, 10.0, at_plateau=False, min_change=1.0, direction="up"),
    MetricSpec(INFERENCE_QUEUE_SECONDS, 0.0, 10.0, at_plateau=False, min_change=0.5, direction="up"),
)


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Thresholds of the detectors; defaults are what the incident suite was tuned on."""

    idle_after_s: float = 600.0  # idle allocated GPU: SM activity near zero for this long
    idle_sm: float = 0.02
    drop_ratio: float = 0.6  # a steady workload's SM activity below this fraction of its level is a fall
    step_ratio: float = 0.65  # a demand-driven one's below this fraction of where it just was is a step
    steady_hold_s: float = 60.0  # a steady workload's fall on one GPU, deep or in bursts, must outlast this
    smooth_hold_s: float = 90.0  # ... and a smooth fall to a new plateau (an evaluation pass?): issue 17 asks 90 s
    pod_hold_s: float = 150.0  # ... and a fall shared by every GPU of a multi-GPU pod (evaluation, checkpoint?)
    demand_hold_s: float = 25.0  # a demand-driven workload's unexplained step must stay down this long
    accept_after_s: float = 1800.0  # a fall that lasts this long is the workload's new normal
    straggler_ratio: float = 0.75
    straggler_hold_s: float = 15.0
    launch_util: float = 0.1  # launch-bound: GPU utilisation (ratio) at least this (trace e's loop read 18-28%) ...
    # ... and at least this many times SM activity: the average resident kernel keeps under a tenth of the
    # SMs busy. Real launch loops read 750-1,000 times; an evaluation or small-batch phase at 4-9 times (80%
    # against 0.18) runs real work on a fifth of the SMs, which is no launch bottleneck (4.0 until 2026-12-06)
    launch_ratio: float = 10.0
    launch_hold_s: float = 60.0  # ... for this long
    throttle_hold_s: float = 5.0
    clock_drop_ratio: float = 0.85
    leak_window_s: float = 60.0
    leak_min_mib: float = 512.0
    # growth that would fill the GPU within this long is a leak (in practice the bound of the twenty-minute
    # window only: no shorter one grows 512 MiB slowly enough to pass it). A steady 55-90 MiB/min leak on a
    # nearly empty 141-GB GPU fills it in 26-42 h, and servers run for weeks (24 h until 2026-12-08)
    leak_horizon_s: float = 48 * 3600.0
    replay_rate: float = 5.0  # PCIe replays per second that make a storm
    sbe_window_s: float = 300.0
    sbe_min: int = 10
    # ... or a burst: at least sbe_burst_min corrected errors, rising in two samples or more, that a
    # GPU correcting sbe_background_per_h an hour (or its own rate, where higher) would see in fewer
    # than one window in 1/sbe_surprise (errors.ecc_sbe says why)
    sbe_burst_min: int = 3
    sbe_background_per_h: float = 1.0
    sbe_surprise: float = 1e-6
    close_after_s: float = 30.0  # a condition clear this long closes the anomaly
    # a throughput drop closes sooner once its activity is back at its level for 10 s (the detector's own
    # hysteresis): two stalls a few seconds of work apart are two incidents, not one
    drop_close_after_s: float = 5.0
    event_close_after_s: float = 300.0  # one-off events (XID, DBE) stay open this long after the last
    metrics: tuple[MetricSpec, ...] = DEFAULT_METRICS  # the general-purpose detector's metrics
