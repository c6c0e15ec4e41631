"""``gpuwatch frames encode|decode``: round trips, bad lines reported with file:line, damage skipped."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import zstandard

from gpuwatch import cmd_frames
from telemetry.records import GpuRecord, parse_line
from tests.support.standin import standin_trace


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    cmd_frames.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def trace_lines(gpus: int = 2, seconds: float = 130) -> list[str]:
    return [r.to_json() for r in standin_trace(gpus, seconds, seed=2)]


def read_records(path: Path) -> list[GpuRecord]:
    return [parse_line(line) for line in path.read_text().splitlines()]


def by_gpu(records: list[GpuRecord]) -> dict[str, list[GpuRecord]]:
    out: dict[str, list[GpuRecord]] = {}
    for r in records:
        out.setdefault(r.gpu, []).append(r)
    return out


def test_lossless_encode_then_decode_gives_the_records_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = trace_lines()
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    gwf, out = tmp_path / "t.gwf", tmp_path / "out.jsonl"
    assert run("frames", "encode", str(src), str(gwf), "--lossless", "--zstd", "3", "--window", "30") == 0
    err = capsys.readouterr().err
    assert f"{len(lines)} records" in err and "0 bad lines skipped" in err
    assert gwf.stat().st_size < src.stat().st_size / 10
    assert run("frames", "decode", str(gwf), str(out)) == 0
    assert by_gpu(read_records(out)) == by_gpu([parse_line(line) for line in lines])


def test_bad_lines_are_reported_with_file_and_line_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = trace_lines(1, 20)
    lines.insert(3, "{not json")
    lines.insert(7, json.dumps({"ts": 1, "node": "n", "gpu": "g", "metrics": {"x": "hot"}}))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    gwf, out = tmp_path / "t.gwf", tmp_path / "out.jsonl"
    assert run("frames", "encode", str(src), str(gwf)) == 1
    err = capsys.readouterr().err
    assert f"{src}:4: invalid JSON" in err
    assert f"{src}:8: metrics.x must be a number" in err
    assert "2 bad lines skipped" in err
    assert run("frames", "decode", str(gwf), str(out)) == 0
    assert len(read_records(out)) == 20


def test_zstd_compressed_jsonl_is_read(tmp_path: Path) -> None:
    lines = trace_lines(1, 15)
    src = tmp_path / "in.jsonl.zst"
    src.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    gwf, out = tmp_path / "t.gwf", tmp_path / "out.jsonl"
    assert run("frames", "encode", str(src), str(gwf)) == 0
    assert run("frames", "decode", str(gwf), str(out)) == 0
    assert len(read_records(out)) == 15


def test_damaged_frames_are_reported_with_offsets_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(trace_lines(1, 100)) + "\n")
    gwf, out = tmp_path / "t.gwf", tmp_path / "out.jsonl"
    assert run("frames", "encode", str(src), str(gwf), "--window", "10", "--keyframe-every", "5") == 0
    data = bytearray(gwf.read_bytes())
    data[200] ^= 0xFF  # inside the first (key)frame
    gwf.write_bytes(bytes(data))
    capsys.readouterr()
    assert run("frames", "decode", str(gwf), str(out)) == 1
    err = capsys.readouterr().err
    assert f"{gwf}: byte 12: frame checksum mismatch" in err
    assert "before any keyframe" in err  # the delta frames that depended on it
    assert len(read_records(out)) == 50  # from the next keyframe on


def test_missing_input_and_foreign_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("frames", "encode", str(tmp_path / "nope.jsonl"), str(tmp_path / "t.gwf")) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    text = tmp_path / "t.jsonl"
    text.write_text('{"ts": 1}\n')
    assert run("frames", "decode", str(text), str(tmp_path / "out.jsonl")) == 2
    assert "not a .gwf frame file" in capsys.readouterr().err


def test_options_are_checked() -> None:
    with pytest.raises(SystemExit):
        run("frames", "encode", "a", "b", "--window", "0")
    with pytest.raises(SystemExit):
        run("frames", "encode", "a", "b", "--zstd", "30")
