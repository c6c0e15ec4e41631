"""``gpuwatch replay``: TELEMETRY.md's anomaly format out, bad lines reported and skipped;
the fast line parser agrees with the contract's parser on any input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.detect.replay import _fast, iter_trace, read_trace
from gpuwatch.cli import main
from telemetry.records import BadLine, RecordError, parse_line, read_jsonl
from tests.detect.helpers import record, trace


def _thermal_trace(path: Path) -> None:
    def make(t: float, g: int):  # type: ignore[no-untyped-def]
        hot = g == 1 and 300 <= t < 400
        return record(t, g, temp=91 if hot else 70, reasons=0x20 if hot else 0x4, clock=1100 if hot else 1485)
    lines = [r.to_json() for r in trace(500, 2, make)]
    lines.insert(10, "{not json")
    lines.insert(20, json.dumps({"ts": 1.0, "node": "n0", "metrics": {}}))
    lines.insert(30, json.dumps({"ts": 1.0, "node": "n0", "gpu": "g", "metrics": {"X": "hot"}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_replay_writes_anomalies_and_reports_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace_file, out = tmp_path / "t.jsonl", tmp_path / "a.json"
    _thermal_trace(trace_file)
    assert main(["replay", str(trace_file), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{trace_file}:11: invalid JSON" in err
    assert f"{trace_file}:21: missing required key 'gpu'" in err
    assert f"{trace_file}:31: metrics.X must be a number" in err
    assert "1000 records, 3 bad lines skipped, 1 anomalies" in err
    anomalies = json.loads(out.read_text())
    assert len(anomalies) == 1
    a = anomalies[0]
    for key in ("gpu", "node", "kind", "metric", "start", "end", "severity", "summary", "causes"):
        assert key in a
    assert a["kind"] == "thermal_throttle" and a["gpu"] == "GPU-n0-1" and a["node"] == "n0"
    assert a["metric"] == "DCGM_FI_DEV_GPU_TEMP" and isinstance(a["start"], float) and a["end"] > a["start"]
    assert "clock event reason SW_THERMAL" in a["causes"]


def test_replay_of_a_missing_file_is_an_error_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_records = st.fixed_dictionaries(
    {"ts": st.floats(0, 2e9) | st.integers(0, 2**31), "node": st.text(min_size=0, max_size=5),
     "gpu": st.text(max_size=5), "metrics": st.dictionaries(st.sampled_from(["A", "B", "DCGM_FI_DEV_GPU_TEMP"]),
                                                             st.integers(-5, 5) | st.floats() | st.none()
                                                             | st.booleans() | st.text(max_size=2))},
    optional={"gpu_index": st.integers(0, 8) | st.booleans() | st.text(max_size=2),
              "processes": st.lists(st.dictionaries(st.sampled_from(["pid", "pod", "sm_util", "name"]),
                                                    _json_values, max_size=4), max_size=2) | _json_values,
              "model": _json_values},
)


def _contract(line: str) -> object:
    try:
        return parse_line(line)
    except RecordError as exc:
        return ("error", str(exc))


@settings(max_examples=300, deadline=None)
@given(st.one_of(_records.map(json.dumps), _json_values.map(json.dumps), st.text(max_size=40)))
def test_fast_parser_agrees_with_the_contract(line: str) -> None:
    fast = _fast(line)
    if fast is not None:
        assert fast == _contract(line)
    items = list(iter_trace([line], "f"))
    if not line.strip():
        assert items == []
        return
    assert len(items) == 1
    expect = _contract(line)
    if isinstance(expect, tuple):
        assert items[0] == BadLine("f", 1, expect[1])
    else:
        assert items[0] == expect


_good = json.dumps({"ts": 1.0, "node": "n0", "gpu": "g0", "metrics": {"A": 1}})
_pieces = st.sampled_from([_good, '{"ts": 2, "node": "n", "gpu": "g", "metrics": {}}', "{not json", '{"a":', "",
                           "  ", "\r", "\n", "\r\n", "\xff", "é"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_pieces, max_size=12), st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
def test_read_trace_gives_what_the_contract_reader_gives(tmp_path_factory: pytest.TempPathFactory,
                                                         pieces: list[str], newline: str, last_newline: bool) -> None:
    """Any newlines, blank, bad and not-UTF-8 lines, a last line without a newline: the same
    records, bad lines and line numbers as the contract's reader."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    text = newline.join(pieces) + (newline if last_newline else "")
    path.write_bytes(text.encode("utf-8", errors="surrogateescape").replace("\xff".encode(), b"\xff"))
    assert list(read_trace(path)) == list(read_jsonl(path))


def test_a_batch_is_judged_alike_however_it_was_cut() -> None:
    """A consumer cuts its batches by size. Its events (XIDs, a lost GPU) were judged after all of
    a batch's records, so an anomaly's start, and whether a lost GPU's readings counted, depended
    on where a batch ended: a replica that took a node over mid-run (reading smaller batches)
    disagreed with one that read it whole (tests/test_replica_kill.py)."""
    from collector.detect import AnomalyLog, DetectionEngine
    from telemetry.records import EventRecord, GpuRecord
    from tests.support.incidents.generate import Fleet

    items = list(Fleet(nodes=4, hours=0.75, seed=23).records())

    def judged(size: int) -> list[tuple[str, str, float]]:
        engine, log = DetectionEngine(), AnomalyLog()
        for i in range(0, len(items), size):
            chunk = items[i:i + size]
            log.add(engine.feed_batch([r for r in chunk if isinstance(r, GpuRecord)],
                                      [e for e in chunk if isinstance(e, EventRecord)]))
        return sorted((a.kind, a.gpu, a.start) for a in log.anomalies)

    one_by_one = judged(1)
    assert len(one_by_one) >= 30
    assert judged(len(items)) == one_by_one
    assert judged(997) == one_by_one
