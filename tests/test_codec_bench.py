"""The codec benchmark and its baselines: Gorilla round-trips, exposition text looks like dcgm-exporter's."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_codec import main, prometheus_text
from benchmarks.gorilla import decode_series, encode_series
from tests.support.standin import standin_trace


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=40),
    st.lists(st.floats(), min_size=40, max_size=40),
)
def test_gorilla_round_trips_timestamps_and_values_bit_for_bit(gaps: list[int], floats: list[float]) -> None:
    ts = [1764489600000]
    for gap in gaps[1:]:
        ts.append(ts[-1] + gap)
    values = floats[: len(ts)]
    writer = encode_series(ts, values)
    got_ts, got_values = decode_series(writer.getvalue(), len(ts))
    assert got_ts == ts
    assert [struct.pack("<d", v) for v in got_values] == [struct.pack("<d", v) for v in values]
    assert len(writer.getvalue()) == (writer.bits + 7) // 8


def test_gorilla_spends_one_bit_per_repeated_value_at_a_steady_interval() -> None:
    writer = encode_series([1000 * (i + 1) for i in range(101)], [5.0] * 101)  # first delta 1000 from t-1
    assert writer.bits == 64 + 23 + 64 + 100 * 2


def test_exposition_has_help_type_labels_and_millisecond_timestamps() -> None:
    records = list(standin_trace(2, 2))
    scrapes = list(prometheus_text(records))
    assert len(scrapes) == 2
    text = scrapes[0]
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    line = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_SM_CLOCK{"))
    assert f'UUID="{records[0].gpu}"' in line and 'Hostname="sim-node-00"' in line and 'gpu="0"' in line
    assert line.rsplit(" ", 1)[1] == str(round(records[0].ts * 1000))


def test_benchmark_runs_end_to_end_and_checks_its_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--standin", "--gpus", "2", "--seconds", "90", "--window", "30", "--repeat", "1", "--json", str(out)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "| Gorilla |" in table and "Where our bytes go" in table
    report = json.loads(out.read_text())
    (trace,) = report.values()
    formats = {r["format"]: r for r in trace["results"]}
    assert set(formats) >= {
        "JSON Lines",
        "JSON Lines + zstd 3",
        "JSON Lines + zstd 19",
        "Prometheus text",
        "Gorilla",
        "gpuwatch frames, lossless",
        "gpuwatch frames, lossless + zstd 3",
        "gpuwatch frames, quantised",
        "gpuwatch frames, quantised + zstd 3",
    }
    assert trace["values"] == 2 * 90 * 32
    assert all(math.isclose(r["bytes_per_value"], r["bytes"] / trace["values"]) for r in trace["results"])
    assert formats["gpuwatch frames, quantised + zstd 3"]["bytes"] < formats["Gorilla"]["bytes"]
