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
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import zstandard

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gorilla import decode_series, encode_series
from telemetry.catalog import BY_KEY
from telemetry.codec import FrameEncoder, StreamDecoder, WindowedEncoder
from telemetry.codec.planes import float64_bytes
from telemetry.records import BadLine, GpuRecord, ProcessRecord, parse_line

T0 = 1764489600.0
H200_MIB = 143771


# ---------------------------------------------------------------- stand-in fleet trace


@dataclass
class _Proc:
    record: ProcessRecord
    share: float


@dataclass
class _GpuSim:
    """One simulated H200: phases of idle, training, inference and memory-bound work."""

    index: int
    node: str
    rng: random.Random
    uuid: str = ""
    phase: str = "idle"
    phase_left: float = 0.0
    temp: float = 32.0
    mem_temp: float = 38.0
    energy_mj: float = 0.0
    energy_reported: int = 0
    replay: int = 0
    procs: list[_Proc] = field(default_factory=list)
    step: int = 0

    def __post_init__(self) -> None:
        self.uuid = "GPU-" + str(uuid.UUID(int=self.rng.getrandbits(128)))
        self.energy_mj = self.rng.uniform(1e9, 5e10)

    def _new_proc(self, kind: str, mem: int, share: float) -> _Proc:
        rng = self.rng
        pod = f"{kind}-{rng.randrange(16**5):05x}"
        service = {"trainer": "llm-pretrain", "infer": "chat-api", "etl": "feature-etl"}[kind]
        proc = ProcessRecord(
            pid=rng.randrange(1000, 4_000_000),
            name="python" if kind != "infer" else "tritonserver",
            used_memory_mib=mem,
            sm_util=0,
            mem_util=0,
            namespace={"trainer": "research", "infer": "serving", "etl": "data"}[kind],
            pod=pod,
            container="main",
            service=service,
        )
        return _Proc(proc, share)

    def _start_phase(self) -> None:
        rng = self.rng
        self.phase = rng.choices(["idle", "training", "inference", "memory"], [2, 4, 3, 1])[0]
        self.phase_left = rng.uniform(300, 1200)
        if self.phase == "training":
            self.procs = [self._new_proc("trainer", rng.randrange(60000, 130000), 1.0)]
        elif self.phase == "inference":
            self.procs = [self._new_proc("infer", rng.randrange(8000, 30000), 0.5) for _ in range(rng.randint(1, 3))]
        elif self.phase == "memory":
            self.procs = [self._new_proc("etl", rng.randrange(20000, 90000), 1.0)]
        else:
            self.procs = []

    def sample(self, t: float, interval: float) -> GpuRecord:
        rng = self.rng
        if self.phase_left <= 0:
            self._start_phase()
        self.phase_left -= interval
        phase = self.phase
        if phase == "inference" and rng.random() < 0.004:  # a replica comes or goes
            if len(self.procs) > 1 and rng.random() < 0.5:
                self.procs.pop(rng.randrange(len(self.procs)))
            else:
                self.procs.append(self._new_proc("infer", rng.randrange(8000, 30000), 0.5))
        wave = math.sin(self.step / 37.0)
        if phase == "training":
            util = 97 + rng.gauss(0, 2)
            copy = 20 + rng.gauss(0, 4)
            power = min(700.0, 640 + rng.gauss(0, 30))
            tensor, dram, occ = 0.86 + rng.gauss(0, 0.02), 0.17 + rng.gauss(0, 0.02), 0.14
            pcie_tx, pcie_rx, nvlink = 0.75 + rng.gauss(0, 0.2), 2.3 + rng.gauss(0, 0.4), 18000 + rng.gauss(0, 1500)
        elif phase == "inference":
            util = 45 + 30 * wave + rng.gauss(0, 8)
            copy = 15 + 10 * wave + rng.gauss(0, 3)
            power = 160 + 3.5 * util + rng.gauss(0, 12)
            tensor, dram, occ = 0.3 * util / 100 + rng.gauss(0, 0.02), 0.25 + rng.gauss(0, 0.03), 0.3
            pcie_tx, pcie_rx, nvlink = 40 + rng.gauss(0, 15), 55 + rng.gauss(0, 15), 0.0
        elif phase == "memory":
            util = 70 + rng.gauss(0, 6)
            copy = 80 + rng.gauss(0, 5)
            power = 420 + rng.gauss(0, 20)
            tensor, dram, occ = 0.02, 0.8 + rng.gauss(0, 0.03), 0.5
            pcie_tx, pcie_rx, nvlink = 5 + rng.gauss(0, 1), 900 + rng.gauss(0, 80), 0.0
        else:
            util = copy = 0.0
            power = 76 + rng.gauss(0, 1.2)
            tensor = dram = occ = 0.0
            pcie_tx, pcie_rx, nvlink = 0.01, 0.02, 0.0
        gpu_util = max(0, min(100, round(util)))
        mem_util = max(0, min(100, round(copy)))
        power = round(max(60.0, power), 3)
        capped = power >= 690.0
        self.energy_mj += power * interval * 1000
        if self.step % 5 == 0:  # a slow call: refreshed every fifth sample
            self.energy_reported = int(self.energy_mj)
        self.temp += (30 + power * 0.07 - self.temp) * 0.03 + rng.gauss(0, 0.2)
        self.mem_temp += (36 + power * 0.06 - self.mem_temp) * 0.03 + rng.gauss(0, 0.2)
        if rng.random() < 0.0005:
            self.replay += 1
        fb_used = 512 + sum(p.record.used_memory_mib or 0 for p in self.procs)
        sm_clock = 345 if phase == "idle" else (1785 - 15 * rng.randrange(4) if capped else 1980)
        gr = max(0.0, min(1.0, gpu_util / 100 * 0.98 + rng.gauss(0, 0.01))) if gpu_util else 0.0
        for p in self.procs:
            p.record.sm_util = max(0, min(100, round(gpu_util * p.share + rng.gauss(0, 2)))) if gpu_util else 0
            p.record.mem_util = max(0, min(100, round(mem_util * p.share + rng.gauss(0, 2)))) if mem_util else 0
            if rng.random() < 0.01:
                p.record.used_memory_mib = (p.record.used_memory_mib or 0) + rng.choice((-256, 256, 512))

        def ratio(x: float) -> float:
            return round(max(0.0, min(1.0, x)), 4)

        def per_s(mib: float) -> float:  # GPM reports MiB/s as a full-precision double
            return max(0.0, mib) * 1048576

        metrics: dict[str, float] = {
            "DCGM_FI_DEV_GPU_UTIL": gpu_util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": mem_util,
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_FB_FREE": H200_MIB - fb_used - 527,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_RESERVED": 527,
            "DCGM_FI_DEV_POWER_USAGE": power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.energy_reported,
            "DCGM_FI_DEV_GPU_TEMP": round(self.temp),
            "DCGM_FI_DEV_MEMORY_TEMP": round(self.mem_temp),
            "DCGM_FI_DEV_SM_CLOCK": sm_clock,
            "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x1 if phase == "idle" else (0x4 if capped else 0),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": self.replay,
            "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_PSTATE": 0,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ratio(gr),
            "DCGM_FI_PROF_SM_ACTIVE": ratio(gr * 0.95 + rng.gauss(0, 0.005)) if gr else 0.0,
            "DCGM_FI_PROF_SM_OCCUPANCY": ratio(occ + rng.gauss(0, 0.01)) if gr else 0.0,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ratio(tensor),
            "DCGM_FI_PROF_DRAM_ACTIVE": ratio(dram),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ratio(0.01 + rng.gauss(0, 0.003)) if gr else 0.0,
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.0,
            "DCGM_FI_PROF_PCIE_TX_BYTES": per_s(pcie_tx),
            "DCGM_FI_PROF_PCIE_RX_BYTES": per_s(pcie_rx),
            "DCGM_FI_PROF_NVLINK_TX_BYTES": per_s(nvlink),
            "DCGM_FI_PROF_NVLINK_RX_BYTES": per_s(nvlink * 0.98),
        }
        self.step += 1
        return GpuRecord(
            ts=round(t + rng.gauss(0, 0.002), 6),
            node=self.node,
            gpu=self.uuid,
            metrics=metrics,
            gpu_index=self.index,
            model="NVIDIA H200",
            processes=[
                ProcessRecord(
                    p.record.pid,
                    p.record.name,
                    p.record.used_memory_mib,
                    p.record.sm_util,
                    p.record.mem_util,
                    p.record.namespace,
                    p.record.pod,
                    p.record.container,
                    p.record.service,
                )
                for p in self.procs
            ],
            pci_bus_id=f"00000000:{0x18 + 0x10 * self.index:02X}:00.0",
            driver_version="580.159.04",
        )


def standin_trace(
    gpus: int, seconds: float, interval: float = 1.0, seed: int = 0, node: str = "sim-node-00"
) -> Iterator[GpuRecord]:
    """A fleet trace of the same shape as ``agent.simulate.trace.generate_trace``, for when that is absent.

    Records ordered by time, all GPUs interleaved; power with mW resolution, integer
    utilisation, slow temperatures, an energy counter refreshed every fifth sample,
    four-decimal ratios, bytes/s from MiB/s, and processes that come and go.
    """
    rng = random.Random(seed)
    sims = [_GpuSim(i, node, random.Random(rng.getrandbits(64))) for i in range(gpus)]
    for step in range(int(seconds / interval)):
        for sim in sims:
            yield sim.sample(T0 + step * interval, interval)


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
