"""The detectors on traces the agent recorded on a real NVIDIA H200 (benchmarks/gpu/).

* ``h200-phases.jsonl``: idle, bf16 training, inference, idle, training, idle: job starts,
  stops and phase changes, no incident. The detectors must stay quiet.
* ``h200-incidents.jsonl``: training, then the same process input-bound (bursts at about a
  quarter duty cycle, ``stall``), then training that keeps 1 GiB more every 2 s
  (``leak``). The phase start times are in ``h200-incidents.phases.txt``.
"""

from __future__ import annotations

from pathlib import Path

from collector.detect.replay import read_trace, replay

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _phases(name: str) -> dict[str, float]:
    lines = (DATA / name).read_text().split("\n")
    return {phase: float(t) for phase, t in (line.split() for line in lines if line.strip())}


def test_phase_changes_on_a_real_h200_raise_nothing() -> None:
    result = replay(read_trace(DATA / "h200-phases.jsonl"))
    assert result.records == 417 and not result.bad_lines
    assert result.anomalies == []


def test_real_h200_stall_and_leak_are_found_and_explained() -> None:
    result = replay(read_trace(DATA / "h200-incidents.jsonl"))
    phases = _phases("h200-incidents.phases.txt")
    by_kind = {a.kind: a for a in result.anomalies}
    assert set(by_kind) == {"throughput_drop", "memory_leak"}
    drop, leak = by_kind["throughput_drop"], by_kind["memory_leak"]
    # fired during its phase, within the 60 s a lone GPU (no peers to compare) must hold
    assert phases["stall"] < drop.start <= phases["stall"] + 75
    assert "same process" in drop.summary and drop.causes
    assert phases["leak"] < leak.start <= phases["leak"] + 75
    assert "out of memory" in leak.summary
