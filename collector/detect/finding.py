"""A detector's verdict on one record, before hysteresis turns it into an :class:`Anomaly`.

Why separate from Anomaly: detectors say "the condition holds now, and here is why";
only the engine decides, from how long it has held, whether that is an anomaly yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.detect.anomaly import Severity


@dataclass(slots=True)
class Finding:
    kind: str
    severity: Severity
    metric: str | None
    summary: str
    causes: list[str] = field(default_factory=list)
    hold: float = 0.0  # seconds the condition must persist before it opens an anomaly


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Thresholds of the detectors; defaults are what the incident suite was tuned on."""

    idle_after_s: float = 600.0  # idle allocated GPU: SM activity near zero for this long
    idle_sm: float = 0.02
    warmup_s: float = 120.0  # a new workload's baseline needs this much history first
    drop_ratio: float = 0.6  # SM activity below this fraction of its baseline is a drop
    drop_hold_s: float = 15.0  # a drop on one GPU/pod while its peers are fine
    alone_hold_s: float = 60.0  # a drop with no peers to compare against
    sync_hold_s: float = 600.0  # a drop shared by the whole pod or service (load cycle, eval pause?)
    straggler_ratio: float = 0.75
    straggler_hold_s: float = 15.0
    throttle_hold_s: float = 5.0
    clock_drop_ratio: float = 0.85
    leak_window_s: float = 60.0
    leak_min_mib: float = 512.0
    leak_horizon_s: float = 24 * 3600.0
    replay_rate: float = 5.0  # PCIe replays per second that make a storm
    sbe_window_s: float = 300.0
    sbe_min: int = 10
    lost_after_s: float = 30.0  # a GPU silent this long while its node's others report
    close_after_s: float = 30.0  # a condition clear this long closes the anomaly
    event_close_after_s: float = 300.0  # one-off events (XID, DBE) stay open this long after the last
