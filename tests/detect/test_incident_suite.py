"""A small run of the GPU incident suite (tests/support/incidents): the detectors find the
labelled incidents and little else, and the replay command agrees with the live engine."""

from __future__ import annotations

import json
from pathlib import Path

from collector.detect import DetectionEngine
from gpuwatch.cli import main
from tests.support.incidents.generate import Fleet
from tests.support.incidents.scoring import evaluate


def test_small_suite_recall_and_precision() -> None:
    result = evaluate([11], nodes=1, hours=1.5)
    assert result["incidents"] >= 10
    assert result["recall"] >= 0.9, result["missed_examples"]
    assert result["precision"] >= 0.9, result["false_positive_examples"]
    assert result["median_latency_s"] <= 30


def test_replay_of_the_exported_trace_matches_the_live_engine(tmp_path: Path) -> None:
    fleet = Fleet(nodes=1, hours=1.0, seed=12)
    engine = DetectionEngine()
    trace = tmp_path / "trace.jsonl"
    live = []
    with open(trace, "w", encoding="utf-8") as fh:
        for rec in fleet.records():
            fh.write(rec.to_json() + "\n")
            live.extend(ch.anomaly.to_dict() for ch in engine.feed(rec) if ch.action == "open")
    out = tmp_path / "anomalies.json"
    assert main(["replay", str(trace), "-o", str(out)]) == 0
    replayed = json.loads(out.read_text())
    assert [(a["kind"], a["gpu"], a["start"]) for a in replayed] == [(a["kind"], a["gpu"], a["start"]) for a in live]
