"""What a detector reports: one anomaly, in the shape of TELEMETRY.md's "Anomaly output".

Why a frozen dataclass of its own: the replay command, the collector's anomalies table and
the alert rules all read the same object, so the field names (``kind``, ``severity``,
``start``, ``end``, ``summary``, ``causes``) are defined once, here. An anomaly is a value:
the engine reports a raised severity or a close as a new one (``dataclasses.replace``), and
whoever holds the old one still holds what was true then.

The ``fingerprint`` names the series an anomaly belongs to (kind, node, GPU), so a reopened
anomaly of the same series has the same fingerprint and a later start; ``key`` (fingerprint
and start) names one anomaly of a series, everywhere it is correlated: the alert router,
the detection service and the anomalies table's unique key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

from telemetry.records import GpuId
from telemetry.xid import Severity as Severity  # the XID table rates XIDs on the same scale as anomalies

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")

AnomalyKind: TypeAlias = Literal[
    "thermal_throttle", "power_throttle", "straggler", "throughput_drop", "idle_allocated", "launch_bound",
    "memory_leak", "xid", "ecc_dbe", "ecc_sbe_rising", "pcie_replay_storm", "gpu_lost", "metric_anomaly",
]
KINDS: tuple[AnomalyKind, ...] = get_args(AnomalyKind)

AnomalyKey: TypeAlias = tuple[str, float]
"""One anomaly: its series' fingerprint and its start."""


def fingerprint(kind: str, node: str, gpu: GpuId) -> str:
    """A stable id of one anomaly series: the same GPU and kind always give the same value."""
    return hashlib.sha1(f"{kind}\x00{node}\x00{gpu}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One detected anomaly; ``end`` is None while it is open."""

    kind: AnomalyKind
    severity: Severity
    node: str
    gpu: GpuId
    metric: str | None
    start: float
    summary: str
    causes: tuple[str, ...] = ()
    end: float | None = None
    gpu_index: int | None = None
    namespace: str | None = None
    pod: str | None = None
    service: str | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.kind, self.node, self.gpu)

    @property
    def key(self) -> AnomalyKey:
        return (self.fingerprint, self.start)

    def labels(self) -> dict[str, str]:
        """The string labels alert rules match on and channels show."""
        out = {"kind": self.kind, "severity": self.severity, "node": self.node, "gpu": self.gpu}
        for name in ("namespace", "pod", "service", "metric"):
            value = getattr(self, name)
            if value:
                out[name] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gpu": self.gpu, "node": self.node, "kind": self.kind, "metric": self.metric,
            "start": self.start, "end": self.end, "severity": self.severity,
            "summary": self.summary, "causes": list(self.causes), "fingerprint": self.fingerprint,
        }
        for name in ("gpu_index", "namespace", "pod", "service"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out
