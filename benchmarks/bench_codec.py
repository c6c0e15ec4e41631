"""Frame codec benchmark: bytes per metric value and one-core throughput against the usual formats.

Run from the repository root::

    .venv/bin/python benchmarks/bench_codec.py --simulate                 # 8 GPUs x 1 h (agent's simulator)
    .venv/bin/python benchmarks/bench_codec.py --standin                  # the same shape, built-in stand-in
    .venv/bin/python benchmarks/bench_codec.py benchmarks/data/h200-phases.jsonl --json out.json  # or .jsonl.zst

For each trace it compares, side by side: JSON Lines; JSON Lines + zstd (levels 3 and 19,
the whole trace as one stream); Prometheus text exposition as dcgm-exporter writes it
(labels gpu/UUID/pci_bus_id/device/modelName/Hostname, timestamps included); Gorilla
(benchmarks/gorilla.py); and the frame codec lossless and quantised, without and with
zstd. Bytes per value divide each format's bytes (timestamps, and for JSON Lines and our
frames the process lists and attributes too) by the number of metric values. Throughput
is metric values per second on one core, encode and decode timed separately, the best
of ``--repeat`` runs (a shared machine's noise only ever adds time). Our frames are
decoded back and checked against the input (bit for bit lossless; within half a quantum
quantised). A per-metric table says where our bytes go (before zstd).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import zstandard

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gorilla import decode_series, encode_series
from telemetry.catalog import BY_KEY
from telemetry.codec import FrameEncoder, StreamDecoder, WindowedEncoder
from telemetry.codec.planes import float64_bytes
from telemetry.records import BadLine, GpuRecord, parse_line
from tests.support.standin import standin_trace

# ---------------------------------------------------------------- baselines


def prometheus_text(records: Sequence[GpuRecord]) -> Iterator[str]:
    """dcgm-exporter-style exposition, one scrape per node and sample round, timestamps in ms."""
    scrape: list[GpuRecord] = []
    seen: set[str] = set()
    for record in records:
        if record.gpu in seen:
            yield _render_scrape(scrape)
            scrape, seen = [], set()
        scrape.append(record)
        seen.add(record.gpu)
    if scrape:
        yield _render_scrape(scrape)


def _labels(record: GpuRecord) -> str:
    index = "" if record.gpu_index is None else str(record.gpu_index)
    parts = [
        f'gpu="{index}"',
        f'UUID="{record.gpu}"',
        f'pci_bus_id="{record.pci_bus_id or ""}"',
        f'device="nvidia{index}"',
        f'modelName="{record.model or ""}"',
        f'Hostname="{record.node}"',
    ]
    if record.processes:
        p = record.processes[0]
        parts += [f'container="{p.container or ""}"', f'namespace="{p.namespace or ""}"', f'pod="{p.pod or ""}"']
    return ",".join(parts)


def _render_scrape(records: Sequence[GpuRecord]) -> str:
    lines: list[str] = []
    keys = dict.fromkeys(k for r in records for k in r.metrics)
    labels = [_labels(r) for r in records]
    for key in keys:
        metric = BY_KEY.get(key)
        if metric is not None:
            lines.append(f"# HELP {key} {metric.help}")
            lines.append(f"# TYPE {key} {metric.kind}")
        for record, label in zip(records, labels, strict=True):
            value = record.metrics.get(key)
            if value is not None:
                text = _exposition_number(value)
                lines.append(f"{key}{{{label}}} {text} {round(record.ts * 1000)}")
    return "\n".join(lines) + "\n"


def _exposition_number(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return repr(value)


def gorilla_series(records: Sequence[GpuRecord]) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for record in records:
        t = round(record.ts * 1000)
        for key, value in record.metrics.items():
            ts, values = series.setdefault((record.gpu, key), ([], []))
            ts.append(t)
            values.append(float(value))
    return series


# ---------------------------------------------------------------- measurement


@dataclass
class Result:
    format: str
    bytes: int
    values: int
    encode_s: float | None = None
    decode_s: float | None = None
    note: str = ""

    @property
    def per_value(self) -> float:
        return self.bytes / self.values

    def rate(self, seconds: float | None) -> float | None:
        return None if not seconds else self.values / seconds


T = TypeVar("T")


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[T, float]:
    """The result of ``fn`` and its fastest time over ``repeat`` runs (the machine's noise only adds)."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def bench_jsonl(records: Sequence[GpuRecord], values: int, repeat: int) -> list[Result]:
    text, enc_s = best_of(repeat, lambda: "".join(r.to_json() + "\n" for r in records))
    raw = text.encode()
    _, dec_s = best_of(repeat, lambda: [parse_line(line) for line in text.splitlines()])
    results = [Result("JSON Lines", len(raw), values, enc_s, dec_s)]
    for level in (3, 19):
        compressor = zstandard.ZstdCompressor(level=level)
        packed, z_s = best_of(repeat, lambda c=compressor: c.compress(raw))  # type: ignore[misc]
        _, unz_s = best_of(repeat, lambda p=packed: zstandard.ZstdDecompressor().decompress(p))  # type: ignore[misc]
        note = "the whole trace as one zstd stream"
        results.append(Result(f"JSON Lines + zstd {level}", len(packed), values, enc_s + z_s, dec_s + unz_s, note))
    return results


def bench_prometheus(records: Sequence[GpuRecord], values: int, repeat: int, parse: bool) -> Result:
    scrapes, enc_s = best_of(repeat, lambda: list(prometheus_text(records)))
    size = sum(len(s.encode()) for s in scrapes)
    dec_s = None
    if parse:
        from prometheus_client.parser import text_string_to_metric_families

        _, dec_s = best_of(repeat, lambda: [list(text_string_to_metric_families(s)) for s in scrapes])
    return Result("Prometheus text", size, values, enc_s, dec_s, "one scrape per sample round, uncompressed")


def bench_gorilla(records: Sequence[GpuRecord], values: int, repeat: int) -> Result:
    series = gorilla_series(records)
    blocks, enc_s = best_of(repeat, lambda: {k: encode_series(ts, vs) for k, (ts, vs) in series.items()})
    size = sum((w.bits + 7) // 8 for w in blocks.values())
    data = {k: w.getvalue() for k, w in blocks.items()}
    decoded, dec_s = best_of(repeat, lambda: {k: decode_series(b, len(series[k][0])) for k, b in data.items()})
    for key, (ts, vs) in series.items():
        got_ts, got_vs = decoded[key]
        if got_ts != ts or float64_bytes(got_vs) != float64_bytes(vs):
            raise AssertionError(f"Gorilla round trip failed for {key}")
    return Result("Gorilla", size, values, enc_s, dec_s, "ms timestamps, one block per GPU and metric")


def encode_frames(
    records: Sequence[GpuRecord], window: int, keyframe_every: int, quantize: bool, zstd_level: int | None
) -> list[bytes]:
    windows = WindowedEncoder(
        window, lambda: FrameEncoder(quantize=quantize, keyframe_every=keyframe_every, zstd_level=zstd_level)
    )
    frames: list[bytes] = []
    for record in records:
        frames.extend(windows.add(record))
    frames.extend(windows.flush())
    return frames


def decode_frames(frames: Sequence[bytes]) -> list[GpuRecord]:
    streams = StreamDecoder()
    decoded: list[GpuRecord] = []
    for frame in frames:
        decoded.extend(streams.decode(frame))
    return decoded


def frame_stats(records: Sequence[GpuRecord], window: int, keyframe_every: int, quantize: bool) -> dict[str, int]:
    """Bytes per section and per metric before zstd, summed over all GPUs."""
    windows = WindowedEncoder(
        window, lambda: FrameEncoder(quantize=quantize, keyframe_every=keyframe_every, collect_stats=True)
    )
    for record in records:
        windows.add(record)
    windows.flush()
    total: dict[str, int] = {}
    for encoder in windows.encoders.values():
        for key, size in (encoder.stats or {}).items():
            total[key] = total.get(key, 0) + size
    return total


def check_round_trip(records: Sequence[GpuRecord], decoded: Sequence[GpuRecord], quantize: bool) -> None:
    """Per GPU, the decoded records equal the input: bit for bit, or within half a quantum."""
    expected: dict[str, list[GpuRecord]] = {}
    got: dict[str, list[GpuRecord]] = {}
    for r in records:
        expected.setdefault(r.gpu, []).append(r)
    for r in decoded:
        got.setdefault(r.gpu, []).append(r)
    for gpu, sent in expected.items():
        back = got.get(gpu, [])
        if len(back) != len(sent):
            raise AssertionError(f"{gpu}: {len(back)} records decoded, {len(sent)} encoded")
        for a, b in zip(sent, back, strict=True):
            if a != b or _bits(a) != _bits(b):
                if not quantize:
                    raise AssertionError(f"lossless round trip differs:\n{a}\n{b}")
                _check_quantised(a, b)


def _bits(record: GpuRecord) -> bytes:
    """The record's timestamp and metric values as IEEE bits, in key order (NaN-proof, -0.0-proof)."""
    keys = sorted(record.metrics)
    return float64_bytes([record.ts, *(record.metrics[k] for k in keys)])


def _check_quantised(a: GpuRecord, b: GpuRecord) -> None:
    for key, value in a.metrics.items():
        metric = BY_KEY.get(key)
        other = b.metrics[key]
        half = metric.resolution / 2 if metric is not None and metric.resolution > 0 else 0.0
        if isinstance(value, float) and half and math.isfinite(value):
            if not abs(other - value) <= half * (1 + 1e-9) + 4 * math.ulp(value):
                raise AssertionError(f"{key}: {other!r} is not within {half} of {value!r}")
        elif float64_bytes([other]) != float64_bytes([value]) or type(other) is not type(value):
            raise AssertionError(f"{key}: {other!r} != {value!r}")


def bench_frames(
    records: Sequence[GpuRecord], values: int, args: argparse.Namespace, quantize: bool, zstd_level: int | None
) -> Result:
    frames, enc_s = best_of(
        args.repeat, lambda: encode_frames(records, args.window, args.keyframe_every, quantize, zstd_level)
    )
    decoded, dec_s = best_of(args.repeat, lambda: decode_frames(frames))
    check_round_trip(records, decoded, quantize)
    mode = "quantised" if quantize else "lossless"
    name = f"gpuwatch frames, {mode}" + (f" + zstd {zstd_level}" if zstd_level is not None else "")
    note = f"window {args.window}, keyframe every {args.keyframe_every}, checked against the input"
    return Result(name, sum(map(len, frames)), values, enc_s, dec_s, note)


@dataclass
class Report:
    name: str
    records: int
    values: int
    results: list[Result]
    stats: dict[str, dict[str, int]]  # mode -> part -> bytes before zstd

    def result(self, name: str) -> Result:
        return next(r for r in self.results if r.format == name)

    def to_json(self) -> dict[str, object]:
        results = [asdict(r) | {"bytes_per_value": r.per_value} for r in self.results]
        return {"records": self.records, "values": self.values, "results": results, "stats": self.stats}


def run(name: str, records: list[GpuRecord], args: argparse.Namespace) -> Report:
    """Every format on one trace. The trace's own objects are frozen out of the garbage
    collector first: they would make every collection during the timings scan a million
    objects that no agent or collector holds."""
    gc.collect()
    gc.freeze()
    values = sum(len(r.metrics) for r in records)
    results: list[Result] = []
    results += bench_jsonl(records, values, args.repeat)
    results.append(bench_prometheus(records, values, args.repeat, not args.fast))
    results.append(bench_gorilla(records, values, args.repeat))
    for quantize in (False, True):
        for level in (None, args.zstd_level):
            results.append(bench_frames(records, values, args, quantize, level))
    stats = {
        "quantised": frame_stats(records, args.window, args.keyframe_every, True),
        "lossless": frame_stats(records, args.window, args.keyframe_every, False),
    }
    gc.unfreeze()
    return Report(name, len(records), values, results, stats)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} M/s"


def markdown(report: Report, zstd_level: int) -> str:
    gorilla = report.result("Gorilla")
    jz19 = report.result("JSON Lines + zstd 19")
    lines = [
        f"### {report.name}: {report.records} records, {report.values} metric values",
        "",
        "| format | bytes | bytes/value | Gorilla / this | JSONL+zstd19 / this | encode | decode | encode+decode |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        both = None if r.encode_s is None or r.decode_s is None else r.encode_s + r.decode_s
        lines.append(
            f"| {r.format} | {r.bytes:,} | {r.per_value:.3f} | {gorilla.bytes / r.bytes:.2f}x "
            f"| {jz19.bytes / r.bytes:.2f}x | {_rate(r.rate(r.encode_s))} | {_rate(r.rate(r.decode_s))} "
            f"| {_rate(r.rate(both))} |"
        )
    lines += ["", "Targets (3x fewer bytes than Gorilla, 1.75x fewer than JSONL+zstd19, 1M values/s):", ""]
    for mode in ("lossless", "quantised"):
        ours = report.result(f"gpuwatch frames, {mode} + zstd {zstd_level}")
        plain = report.result(f"gpuwatch frames, {mode}")
        rate = plain.rate((plain.encode_s or 0) + (plain.decode_s or 0)) or 0.0
        lines.append(
            f"- {mode}: {gorilla.bytes / ours.bytes:.2f}x vs Gorilla "
            f"({'met' if gorilla.bytes >= 3 * ours.bytes else 'missed'}), "
            f"{jz19.bytes / ours.bytes:.2f}x vs JSONL+zstd19 "
            f"({'met' if jz19.bytes >= 1.75 * ours.bytes else 'missed'}), "
            f"encode+decode {rate / 1e6:.2f} M values/s ({'met' if rate >= 1e6 else 'missed'})"
        )
    q, lossless = report.stats["quantised"], report.stats["lossless"]
    lines += [
        "",
        "Where our bytes go (before zstd; bytes per metric value of the whole trace):",
        "",
        "| part | quantised bytes | quantised B/value | lossless bytes | lossless B/value |",
        "|---|---:|---:|---:|---:|",
    ]
    skip = {"records", "values", "zstd saving"}
    keys = sorted((k for k in q if k not in skip), key=lambda k: -q[k])
    values = report.values
    for key in keys:
        lines.append(
            f"| {key} | {q[key]:,} | {q[key] / values:.4f} | {lossless.get(key, 0):,} "
            f"| {lossless.get(key, 0) / values:.4f} |"
        )
    total_q = sum(q[k] for k in keys)
    total_l = sum(lossless.get(k, 0) for k in keys)
    lines.append(f"| **total** | {total_q:,} | {total_q / values:.4f} | {total_l:,} | {total_l / values:.4f} |")
    return "\n".join(lines) + "\n"


def load_trace(path: str) -> tuple[list[GpuRecord], list[BadLine]]:
    from gpuwatch.cmd_frames import read_records

    records: list[GpuRecord] = []
    bad: list[BadLine] = []
    for item in read_records(path):
        (bad if isinstance(item, BadLine) else records).append(item)  # type: ignore[arg-type]
    return records, bad


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("traces", nargs="*", help="JSON Lines traces (.jsonl or .jsonl.zst)")
    parser.add_argument("--simulate", action="store_true", help="the agent's simulated fleet trace")
    parser.add_argument("--standin", action="store_true", help="the built-in stand-in fleet trace")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=60, help="records per frame (default 60)")
    parser.add_argument("--keyframe-every", type=int, default=10)
    parser.add_argument("--zstd-level", type=int, default=3, help="zstd level for our frames (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="time each step this many times, keep the best")
    parser.add_argument("--fast", action="store_true", help="skip parsing the Prometheus text (slow)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    traces: list[tuple[str, list[GpuRecord]]] = []
    if args.simulate:
        from agent.simulate.trace import generate_trace

        name = f"simulated fleet, {args.gpus} GPUs x {args.seconds:g} s"
        traces.append((name, list(generate_trace(args.gpus, args.seconds, args.interval, args.seed))))
    if args.standin:
        name = f"stand-in fleet, {args.gpus} GPUs x {args.seconds:g} s"
        traces.append((name, list(standin_trace(args.gpus, args.seconds, args.interval, args.seed))))
    for path in args.traces:
        records, bad = load_trace(path)
        for line in bad:
            print(line, file=sys.stderr)
        traces.append((path, records))
    if not traces:
        parser.error("give trace paths, --simulate or --standin")
    out: dict[str, object] = {}
    for name, records in traces:
        report = run(name, records, args)
        print(markdown(report, args.zstd_level))
        out[name] = report.to_json()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
