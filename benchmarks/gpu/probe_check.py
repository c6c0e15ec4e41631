"""The kernel probe on a real GPU (issue 15): durations against torch.profiler, and its cost.

Run on the GPU machine (PyTorch, and cupti-python with its dependencies, on the path)::

    OUT=/tmp/out python3 benchmarks/gpu/probe_check.py default durations conflict
    OUT=/tmp/out python3 benchmarks/gpu/probe_check.py always

Parts (each writes ``$OUT/probe-<part>.json``):

* ``durations``: one mixed step (a bf16 matmul, softmax, layer norm, a tiny add) run 50
  times under ``torch.profiler`` (kineto, CUDA activities), then 50 times in one probe window;
  the mean duration of each kernel that both saw at least 20 times, probe over profiler.
* ``default`` / ``always``: throughput with the probe against without, in one process, in
  alternating rounds (off, on, off, on, ...), on a training-like loop (large matmuls, GPU-bound)
  and an inference-like loop of tiny kernels (launch-bound, ~100,000 kernels a second). The
  probe's windows go to a Unix datagram socket read in this process, so the whole path runs;
  ``default`` is the shipped duty cycle (up to 1 s in every 10 s, 5,000 records at most),
  ``always`` records back to back (1-s windows every second, no record cap).
* ``local``: the same cost measured where it happens. Rounds compare slow-drifting host
  speed (a launch-bound loop varied ±15% between 20-s rounds on the H200 host), so here the
  probe runs at its default duty for 60 s while every batch of the loop is timed; batches that
  overlap a window (from its start to 50 ms after its end: the fold and send) are compared with
  the median batch of the 2 s around it. The extra time over all windows, divided by the run's
  length, is the probe's cost.
* ``conflict``: with ``torch.profiler`` recording, a probe window is skipped, and the probe
  does not take CUPTI from it.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from probe.demangle import shorten
from probe.runtime import Probe
from probe.settings import ProbeSettings
from telemetry.kernels import KernelWindow

OUT = Path(os.environ.get("OUT", "."))
QUICK = os.environ.get("PROBE_CHECK_QUICK") == "1"  # a smoke run of every part: 2-s rounds, one pair
DEV = "cuda"


class Sink:
    """The agent's end of the socket, reduced to reading and decoding datagrams."""

    def __init__(self) -> None:
        self.path = os.path.join(tempfile.mkdtemp(), "probe.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.windows: list[KernelWindow] = []
        self.bytes = 0
        self.bad = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            self.bytes += len(data)
            try:
                self.windows.append(KernelWindow.decode(data))
            except ValueError:
                self.bad += 1


def tensors() -> dict[str, torch.Tensor]:
    return {"a": torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16),
            "b": torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16),
            "x": torch.randn(2048, 4096, device=DEV), "tiny": torch.zeros(1024, device=DEV)}


def mixed_step(t: dict[str, torch.Tensor]) -> None:
    torch.matmul(t["a"], t["b"])
    torch.softmax(t["x"], dim=-1)
    torch.nn.functional.layer_norm(t["x"], (4096,))
    t["tiny"].add_(1.0)


def train_like(t: dict[str, torch.Tensor]) -> int:
    for _ in range(20):
        torch.matmul(t["a"], t["b"])
    torch.cuda.synchronize()
    return 20


def tiny_kernels(t: dict[str, torch.Tensor]) -> int:
    tiny = t["tiny"]
    for _ in range(1000):
        tiny.add_(1.0)
    torch.cuda.synchronize()
    return 1000


def durations(sink: Sink) -> dict[str, Any]:
    t = tensors()
    for _ in range(10):
        mixed_step(t)
    torch.cuda.synchronize()
    probe = Probe(ProbeSettings(period_s=60, window_s=60, max_records=10**9, socket=sink.path))
    assert probe.prepare(), probe.reason
    probe._length = 30.0
    result: list[KernelWindow | None] = []
    th = threading.Thread(target=lambda: result.append(probe.window()))
    th.start()
    time.sleep(0.5)
    for _ in range(50):
        mixed_step(t)
    torch.cuda.synchronize()
    probe._stop.set()
    th.join()
    window = result[0]
    assert window is not None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            mixed_step(t)
        torch.cuda.synchronize()
    kineto: dict[str, tuple[int, float]] = {}
    for e in prof.key_averages():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and e.count:
            kineto[shorten(e.key)] = (e.count, e.device_time_total / e.count)  # µs
    rows = []
    for k in window.kernels:
        match = kineto.get(k.name)
        if match and k.calls >= 20 and match[0] >= 20:
            rows.append({"kernel": k.name[:120], "category": k.category, "probe_calls": k.calls,
                         "profiler_calls": match[0], "probe_mean_us": k.mean_ns / 1000,
                         "profiler_mean_us": match[1], "ratio": (k.mean_ns / 1000) / match[1],
                         "occupancy": k.occupancy, "registers": k.registers, "block": k.block})
    return {"matched": rows, "probe_kernels": [k.name[:120] for k in window.kernels],
            "profiler_kernels": sorted(kineto)[:20], "launch_calls": window.launch_calls,
            "runtime_filtered": probe.source.runtime_filtered if probe.source else None,
            "records": window.records, "busy_ns": window.busy_ns, "idle_ns": window.idle_ns,
            "worst_ratio_off_by": max((abs(r["ratio"] - 1) for r in rows), default=None)}


def overhead(sink: Sink, settings: ProbeSettings, round_s: float, pairs: dict[str, int]) -> dict[str, Any]:
    if QUICK:
        round_s, pairs = 2.0, dict.fromkeys(pairs, 1)
    t = tensors()
    out: dict[str, Any] = {"settings": {"period_s": settings.period_s, "window_s": settings.window_s,
                                        "max_records": settings.max_records}, "round_s": round_s}
    for name, fn in (("train_like", train_like), ("tiny_kernels", tiny_kernels)):
        for _ in range(3):
            fn(t)  # warm-up
        off: list[float] = []
        on: list[float] = []
        windows0, bytes0 = len(sink.windows), sink.bytes
        for _ in range(pairs[name]):
            for enabled in (False, True):
                probe = Probe(settings) if enabled else None
                if probe is not None:
                    assert probe.start(), probe.reason
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < round_s:
                    n += fn(t)
                rate = n / (time.perf_counter() - t0)
                if probe is not None:
                    probe.stop()
                (on if enabled else off).append(rate)
        got = sink.windows[windows0:]
        pair_ratios = [b / a for a, b in zip(off, on, strict=True)]
        out[name] = {"off_per_s": off, "on_per_s": on,
                     "overhead_median_pairs": 1 - statistics.median(pair_ratios),
                     "overhead_medians": 1 - statistics.median(on) / statistics.median(off),
                     "windows": len(got), "window_s_mean": statistics.mean(w.duration_s for w in got) if got else 0,
                     "records_per_window": statistics.mean(w.records for w in got) if got else 0,
                     "probe_cpu_s_per_window": statistics.mean(w.extra.get("probe_cpu_s", 0) for w in got)
                     if got else 0,
                     "bytes_per_window": (sink.bytes - bytes0) / len(got) if got else 0,
                     "kernels_per_window": statistics.mean(len(w.kernels) for w in got) if got else 0,
                     "top_kernel": got[-1].kernels[0].name[:100] if got and got[-1].kernels else None}
    return out


def local(sink: Sink, seconds: float = 60.0) -> dict[str, Any]:
    t = tensors()
    out: dict[str, Any] = {"seconds_per_loop": seconds}
    for name, fn in (("tiny_kernels", tiny_kernels), ("train_like", train_like)):
        for _ in range(3):
            fn(t)
        w0 = len(sink.windows)
        probe = Probe(ProbeSettings(socket=sink.path))
        assert probe.start(), probe.reason
        batches: list[tuple[float, float]] = []
        start = time.time()
        while time.time() - start < seconds:
            b0 = time.time()
            fn(t)
            batches.append((b0, time.time()))
        probe.stop()
        time.sleep(0.3)
        spans = [(w.ts, w.ts + w.duration_s + 0.05) for w in sink.windows[w0:]]
        extra = 0.0
        hit = 0
        for a, b in spans:
            inside = [(x, y) for x, y in batches if y > a and x < b]
            around = [y - x for x, y in batches if (a - 1.0 <= x < a) or (b < x <= b + 1.0)]
            if not inside or len(around) < 5:
                continue
            base = statistics.median(around)
            extra += sum((y - x) - base for x, y in inside)
            hit += 1
        total = batches[-1][1] - batches[0][0]
        out[name] = {"windows": len(spans), "windows_measured": hit, "extra_s": extra, "run_s": total,
                     "overhead": extra / total, "batch_median_s": statistics.median(y - x for x, y in batches),
                     "window_s_mean": statistics.mean(w.duration_s for w in sink.windows[w0:]) if spans else 0}
    return out


def conflict(sink: Sink) -> dict[str, Any]:
    t = tensors()
    from torch.profiler import ProfilerActivity, profile
    probe = Probe(ProbeSettings(period_s=60, window_s=0.2, socket=sink.path))
    res: dict[str, Any] = {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        mixed_step(t)
        res["prepare_while_profiling"] = probe.prepare()
        res["reason"] = probe.reason
        res["window_while_profiling"] = None if probe.source is None else repr(probe.window())
        res["skipped"] = probe.skipped
        for _ in range(5):
            mixed_step(t)
        torch.cuda.synchronize()
    res["profiler_still_saw_kernels"] = sum(1 for e in prof.key_averages()
                                            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    after = Probe(ProbeSettings(period_s=60, window_s=0.3, socket=sink.path))
    res["prepare_after"] = after.prepare()
    th = threading.Thread(target=lambda: res.setdefault("window_after", after.window()))
    th.start()
    for _ in range(20):
        mixed_step(t)
    th.join()
    w = res.pop("window_after")
    res["window_after_kernels"] = None if w is None else sum(k.calls for k in w.kernels)
    return res


def main(parts: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    sink = Sink()
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "date": time.strftime("%F %T")}
    for part in parts:
        t0 = time.time()
        if part == "durations":
            res = durations(sink)
        elif part == "default":
            res = overhead(sink, ProbeSettings(socket=sink.path), 20.0, {"train_like": 3, "tiny_kernels": 6})
        elif part == "always":
            res = overhead(sink, ProbeSettings(period_s=1.0, window_s=1.0, max_records=10**9, socket=sink.path),
                           10.0, {"train_like": 3, "tiny_kernels": 3})
        elif part == "local":
            res = local(sink)
        elif part == "conflict":
            res = conflict(sink)
        else:
            print(f"unknown part {part!r}", file=sys.stderr)
            return 2
        res = {**info, "part": part, "seconds": time.time() - t0, "bad_datagrams": sink.bad, **res}
        text = json.dumps(res, indent=1, default=str)
        print(text, flush=True)
        (OUT / f"probe-{part}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["durations", "default"]))
