"""Scoring the detectors on the incident generator: recall, precision and detection latency, per kind.

Why in tests/support: the CI test of a small suite and ``benchmarks/incidents/evaluate.py``
(the command behind the figures in docs/benchmarks.md) must score the same way.

Matching: an anomaly detects an incident when it has the incident's kind and GPU and
starts between the fault's onset and 60 s after the incident ends; only the first such
anomaly counts, and any anomaly that detects no incident is a false positive (so an
anomaly of the wrong kind counts against precision and does not help recall). Latency is
the anomaly's ``start`` minus the incident's ``start`` (for an idle allocated GPU that is
the onset plus the configured 10 min, since the detector is asked to wait that long).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from collector.detect import Anomaly, AnomalyLog, DetectionEngine
from telemetry.records import EventRecord, GpuRecord
from tests.support.incidents.generate import KINDS, Fleet, Incident


class IncidentFleet(Protocol):
    """What a generator gives the scorer: its records and events in time order, and its incidents."""

    incidents: list[Incident]

    def records(self) -> Iterator[GpuRecord | EventRecord]: ...

GRACE = 60.0


def match(incidents: list[Incident], anomalies: list[Anomaly]) -> tuple[dict[int, float], set[int]]:
    """incident index -> latency of its first detection; indices of anomalies that matched."""
    detected: dict[int, float] = {}
    used: set[int] = set()
    by_gpu: dict[tuple[str, str], list[tuple[int, Incident]]] = {}
    for i, inc in enumerate(incidents):
        by_gpu.setdefault((inc.gpu, inc.kind), []).append((i, inc))
    for j, a in sorted(enumerate(anomalies), key=lambda x: x[1].start):
        for i, inc in by_gpu.get((a.gpu, a.kind), []):
            if inc.onset <= a.start <= inc.end + GRACE:
                used.add(j)
                if i not in detected:
                    detected[i] = max(0.0, a.start - inc.start)
                break
    return detected, used


def evaluate(seeds: list[int], nodes: int, hours: float, write_trace: str | None = None,
             generator: str = "tuning", make_fleet: Callable[..., IncidentFleet] = Fleet) -> dict[str, Any]:
    """Run the detectors over ``make_fleet(nodes=, hours=, seed=)`` for each seed; ``generator`` names it."""
    per_kind: dict[str, dict[str, Any]] = {k: {"incidents": 0, "detected": 0, "anomalies": 0, "false_positives": 0,
                                               "latencies": []} for k in KINDS}
    fp_examples: list[dict[str, Any]] = []
    missed: list[dict[str, Any]] = []
    shapes: dict[str, dict[str, Any]] = {}  # throughput drops by the shape the generator gave them
    records = 0
    detect_s = 0.0
    for seed in seeds:
        fleet = make_fleet(nodes=nodes, hours=hours, seed=seed)
        engine = DetectionEngine()
        log = AnomalyLog()
        out = open(write_trace, "w", encoding="utf-8") if write_trace else None  # noqa: SIM115
        for rec in fleet.records():
            t0 = time.perf_counter()
            if isinstance(rec, EventRecord):
                changes = engine.feed_event(rec)
            else:
                if out is not None:
                    out.write(rec.to_json() + "\n")
                records += 1
                changes = engine.feed(rec)
            log.add(changes)
            detect_s += time.perf_counter() - t0
        anomalies: list[Anomaly] = log.anomalies
        if out is not None:
            out.close()
            write_trace = None  # only the first seed's trace
        detected, used = match(fleet.incidents, anomalies)
        for i, inc in enumerate(fleet.incidents):
            row = per_kind[inc.kind]
            row["incidents"] += 1
            if inc.kind == "throughput_drop":
                shape = shapes.setdefault(str(inc.to_dict().get("detail", {}).get("shape", "?")),
                                          {"n": 0, "found": 0, "latencies": []})
                shape["n"] += 1
                if i in detected:
                    shape["found"] += 1
                    shape["latencies"].append(detected[i])
            if i in detected:
                row["detected"] += 1
                row["latencies"].append(detected[i])
            elif len(missed) < 30:
                missed.append({"seed": seed, **inc.to_dict()})
        for j, a in enumerate(anomalies):
            per_kind.setdefault(a.kind, {"incidents": 0, "detected": 0, "anomalies": 0, "false_positives": 0,
                                         "latencies": []})
            per_kind[a.kind]["anomalies"] += 1
            if j not in used:
                per_kind[a.kind]["false_positives"] += 1
                if len(fp_examples) < 30:
                    fp_examples.append({"seed": seed, **a.to_dict()})
    all_lat = [x for r in per_kind.values() for x in r["latencies"]]
    incidents = sum(r["incidents"] for r in per_kind.values())
    found = sum(r["detected"] for r in per_kind.values())
    n_anom = sum(r["anomalies"] for r in per_kind.values())
    fps = sum(r["false_positives"] for r in per_kind.values())
    table = {}
    for kind, r in per_kind.items():
        lat = sorted(r["latencies"])
        table[kind] = {
            "incidents": r["incidents"], "detected": r["detected"],
            "recall": r["detected"] / r["incidents"] if r["incidents"] else None,
            "anomalies": r["anomalies"], "false_positives": r["false_positives"],
            "precision": (r["anomalies"] - r["false_positives"]) / r["anomalies"] if r["anomalies"] else None,
            "median_latency_s": statistics.median(lat) if lat else None,
            "max_latency_s": lat[-1] if lat else None,
        }
    return {
        "generator": generator, "seeds": seeds, "nodes": nodes, "hours": hours, "records": records,
        "incidents": incidents, "detected": found, "recall": found / incidents if incidents else None,
        "anomalies": n_anom, "false_positives": fps, "precision": (n_anom - fps) / n_anom if n_anom else None,
        "median_latency_s": statistics.median(all_lat) if all_lat else None,
        "detect_records_per_s": records / detect_s if detect_s else None,
        "per_kind": table, "false_positive_examples": fp_examples, "missed_examples": missed,
        "throughput_drop_shapes": {k: {"n": v["n"], "found": v["found"],
                                       "median_s": statistics.median(v["latencies"]) if v["latencies"] else None}
                                   for k, v in sorted(shapes.items())},
    }
