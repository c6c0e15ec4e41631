"""The simulated driver writes what a real H200 writes: the same metric keys, record fields and value types.

Checked against the traces the agent recorded on an NVIDIA H200 (``benchmarks/data/
h200-labelled*.jsonl``, benchmarks/gpu/record_labelled.py): the metric keys of the first
sample (before GPM has two readings) and of every later one, each metric's JSON type (an
integer counter never turns into a float), the record's own fields and the process
fields. Both sides go through ``GpuRecord.to_json`` / JSON as the contract carries them,
so a simulator that drifts from the hardware fails here, not in a dashboard.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.simulate.trace import generate_trace
from telemetry.catalog import BY_KEY

TRACES = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "data").glob("h200-labelled*.jsonl"))


class Shape:
    """The keys and JSON value types of a stream of records."""

    def __init__(self, lines: list[str]) -> None:
        self.first: set[str] | None = None
        self.later: set[str] = set()
        self.metric_types: dict[str, set[str]] = {}
        self.fields: dict[str, set[str]] = {}
        self.process_fields: dict[str, set[str]] = {}
        previous: dict[str, Any] = {}
        for line in lines:
            obj = json.loads(line)
            metrics: dict[str, Any] = obj.pop("metrics")
            if obj["gpu"] not in previous:
                self.first = set(metrics) if self.first is None else self.first & set(metrics)
            else:
                self.later |= set(metrics)
            previous[obj["gpu"]] = obj
            for key, value in metrics.items():
                self.metric_types.setdefault(key, set()).add(type(value).__name__)
            for process in obj.pop("processes", None) or []:
                for key, value in process.items():
                    self.process_fields.setdefault(key, set()).add(type(value).__name__)
            for key, value in obj.items():
                self.fields.setdefault(key, set()).add(type(value).__name__)


def _real() -> Shape:
    assert TRACES, "no recorded H200 trace in benchmarks/data"
    return Shape([line for path in TRACES for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])


def _simulated() -> Shape:
    return Shape([record.to_json() for record in generate_trace(2, 90)])


def _driver_keys(keys: set[str] | None) -> set[str]:
    """The keys a driver gives (NVML's, the simulator's): not the host reader's rows nor the
    inference scraper's, which the agent adds beside the driver's (trace h was recorded by an
    agent that reads the host; the simulator's trace has no host of its own)."""
    return {key for key in keys or () if BY_KEY[key].cost not in ("host", "scrape")}


def test_the_simulator_has_the_h200_metric_keys() -> None:
    real, sim = _real(), _simulated()
    assert _driver_keys(sim.first) == _driver_keys(real.first), "keys of a GPU's first sample (GPM needs two)"
    assert _driver_keys(sim.later) == _driver_keys(real.later)


def test_every_simulated_metric_has_a_type_the_h200_wrote() -> None:
    real, sim = _real(), _simulated()
    wrong = {k: (sorted(t), sorted(real.metric_types.get(k, ()))) for k, t in sim.metric_types.items()
             if not t <= real.metric_types.get(k, set())}
    assert not wrong, f"simulated type vs the H200's: {wrong}"


def test_record_and_process_fields_match_the_h200() -> None:
    real, sim = _real(), _simulated()
    assert sim.fields == real.fields
    assert real.process_fields, "the recorded traces have GPU processes"
    for key, types in real.process_fields.items():  # the simulator adds pod identities a bare host lacks
        assert sim.process_fields.get(key) == types, key
