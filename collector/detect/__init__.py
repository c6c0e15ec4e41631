"""Streaming anomaly detection over the telemetry record stream.

Why a package: the collector (live) and ``gpuwatch replay`` (files) run the same
detectors; everything here is a pure function of the records and the detectors' own
state, with time taken from the records. :class:`DetectionEngine` is the entry point;
each detector module holds one family (throttling, SM activity, memory, hardware errors).
"""

from collector.detect.anomaly import Anomaly, AnomalyKey, AnomalyKind, Severity, fingerprint
from collector.detect.engine import AnomalyLog, Change, DetectionEngine
from collector.detect.finding import DetectorConfig

__all__ = ["Anomaly", "AnomalyKey", "AnomalyKind", "AnomalyLog", "Change", "DetectionEngine", "DetectorConfig",
           "Severity", "fingerprint"]
