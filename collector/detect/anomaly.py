"""What a detector reports: one anomaly, in the shape of TELEMETRY.md's "Anomaly output".

Why a frozen-ish dataclass of its own: the replay command, the collector's anomalies
table and the alert rules all read the same object, so the field names (``kind``,
``severity``, ``start``, ``end``, ``summary``, ``causes``) are defined once, here.
The ``fingerprint`` names the series an anomaly belongs to (kind, node, GPU), so a
reopened anomaly of the same series has the same fingerprint and a later start.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from telemetry.xid import Severity as Severity  # the XID table rates XIDs on the same scale as anomalies

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")


def fingerprint(kind: str, node: str, gpu: str) -> str:
    """A stable id of one anomaly series: the same GPU and kind always give the same value."""
    return hashlib.sha1(f"{kind}\x00{node}\x00{gpu}".encode()).hexdigest()[:16]


@dataclass(slots=True)
class Anomaly:
    """One detected anomaly; ``end`` is None while it is open."""

    kind: str
    severity: Severity
    node: str
    gpu: str
    metric: str | None
    start: float
    summary: str
    causes: list[str] = field(default_factory=list)
    end: float | None = None
    gpu_index: int | None = None
    namespace: str | None = None
    pod: str | None = None
    service: str | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.kind, self.node, self.gpu)

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
