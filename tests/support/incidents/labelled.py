"""Scoring a real trace against its labels: every incident found, nothing on a normal phase.

Why in tests/support: the recording script on the GPU machine, the CI test of the committed
trace and docs/benchmarks.md report the same figures. A labels file (written by
benchmarks/gpu/workload_labelled.py) lists phases ``{phase, start, end, expect}``;
``expect`` is an anomaly kind or ``normal``. An incident phase is *found* when an anomaly
of its kind starts inside it (latency: the anomaly's start minus the phase's); an anomaly
that starts inside a normal phase is a *false* one, except one that continues what the
phase before began within its first ``GRACE`` seconds (an incident's anomaly opening just
as the incident ends). The command is ``benchmarks/incidents/labelled.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from collector.detect.anomaly import Anomaly
from collector.detect.replay import read_trace, replay
from telemetry.records import BadLine, GpuRecord

GRACE = 10.0


def score(anomalies: list[Anomaly], phases: list[dict[str, Any]]) -> dict[str, Any]:
    incidents = []
    false = []
    for a in anomalies:
        phase = next((p for p in phases if p["start"] <= a.start < p["end"]), None)
        if phase is None:
            continue  # outside the labelled run
        if phase["expect"] != "normal" and a.kind == phase["expect"]:
            continue
        i = phases.index(phase)
        before = phases[i - 1] if i else None
        if before is not None and before["expect"] == a.kind and a.start - phase["start"] <= GRACE:
            continue
        false.append({"phase": phase["phase"], "kind": a.kind, "at_s": round(a.start - phase["start"], 1),
                      "summary": a.summary})
    for p in phases:
        if p["expect"] == "normal":
            continue
        hit = next((a for a in anomalies if a.kind == p["expect"] and p["start"] <= a.start < p["end"] + GRACE),
                   None)
        incidents.append({"phase": p["phase"], "expect": p["expect"], "seconds": round(p["end"] - p["start"], 1),
                          "found": hit is not None,
                          "latency_s": round(hit.start - p["start"], 1) if hit is not None else None,
                          "summary": hit.summary if hit is not None else None})
    return {"incidents": incidents, "found": sum(1 for i in incidents if i["found"]), "false": false,
            "normal_phases": sum(1 for p in phases if p["expect"] == "normal"),
            "anomalies": len(anomalies)}


def resampled(items: Iterable[GpuRecord | BadLine], interval: float) -> Iterator[GpuRecord | BadLine]:
    """The trace as an agent sampling every ``interval`` seconds would have sent it: a GPU's record
    is kept when it comes ``interval`` (less a tenth of a second) or more after its last kept one.
    Why: the agent stretches its interval up to its ceiling (10 s) under its CPU budget, and an
    operator may set a longer one; the detectors must not hold only at the 1 s they were recorded at.
    (The agent's SM activity is a mean over its interval; a kept 1-s reading is a shorter mean, so
    this is the harder case for a fall that comes in bursts.)"""
    last: dict[str, float] = {}
    for item in items:
        if isinstance(item, GpuRecord):
            seen = last.get(item.gpu)
            if seen is not None and item.ts - seen < interval - 0.1:
                continue
            last[item.gpu] = item.ts
        yield item


def evaluate(trace: Path, labels: Path, interval: float | None = None) -> dict[str, Any]:
    """``interval``: score the trace re-sampled at that many seconds (:func:`resampled`)."""
    items = read_trace(trace)
    result = replay(resampled(items, interval) if interval else items)
    out = score(result.anomalies, json.loads(labels.read_text(encoding="utf-8"))["phases"])
    out["records"] = result.records
    out["bad_lines"] = result.bad_lines
    return out
