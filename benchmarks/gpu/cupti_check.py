"""What CUPTI's activity API gives on this GPU, through cupti-python, before a probe is built on it (issue 15).

Run on the GPU machine (PyTorch present, the wheels of cupti-python, nvidia-cuda-cupti,
cuda-bindings, cuda-pathfinder and pyelftools on the path)::

    OUT=/tmp/out python3 benchmarks/gpu/cupti_check.py

It answers three questions and writes ``$OUT/cupti-check.json``:

1. Does cupti-python load against this driver and the CUDA that PyTorch brings, and which
   versions are they?
2. Do CUPTI's kernel durations agree with CUDA events around the same kernels (a 4096² bf16
   matmul; issue 15 asks within 5%)?
3. What does always-on activity collection (concurrent kernels and runtime API calls, then
   kernels alone) cost in throughput, on a training-like loop (2,000 large matmuls a round) and
   on an inference-like loop of many tiny kernels (100,000 a round)? Rounds with and without
   it alternate in one process, so the ratio is of the same GPU, clocks and process.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

ROUNDS = 6


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    result: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                              "device": torch.cuda.get_device_name(0)}
    try:
        from cupti import cupti
    except Exception as exc:  # noqa: BLE001 - any failure to load is the answer to question 1
        result["cupti"] = f"not loaded: {type(exc).__name__}: {exc}"
        print(json.dumps(result, indent=1))
        (out / "cupti-check.json").write_text(json.dumps(result, indent=1) + "\n")
        return 1
    from importlib.metadata import version
    result["cupti_python"] = version("cupti-python")
    result["nvidia_cuda_cupti"] = version("nvidia-cuda-cupti")

    kernels: list[tuple[str, int]] = []
    runtime_calls = [0]

    def requested() -> tuple[int, int]:
        return 8 * 1024 * 1024, 0

    def completed(sink: list[tuple[str, int]], activities: list[Any]) -> None:
        for a in activities:
            if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
                sink.append((a.name, a.end - a.start))
            elif a.kind == cupti.ActivityKind.RUNTIME:
                runtime_calls[0] += 1

    kinds = (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.RUNTIME)
    cupti.activity_register_callbacks(requested, partial(completed, kernels))

    enabled: list[Any] = []

    def collect(on: bool, which: tuple[Any, ...] = kinds) -> None:
        if on:
            for k in which:
                cupti.activity_enable(k)
                enabled.append(k)
        else:
            while enabled:
                cupti.activity_disable(enabled.pop())

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tiny = torch.zeros(1024, device="cuda")

    def train_like(n: int = 2000) -> None:
        for _ in range(n):
            torch.matmul(a, b)

    def tiny_kernels(n: int = 100_000) -> None:
        for _ in range(n):
            tiny.add_(1.0)

    for fn in (train_like, tiny_kernels):  # warm-up: cuBLAS handles, allocator, clocks
        fn()
    torch.cuda.synchronize()

    # 2. durations: CUDA events around each matmul, CUPTI's records of the same matmuls
    collect(True)
    kernels.clear()
    events = []
    for _ in range(100):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, b)
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    cupti.activity_flush_all(1)
    collect(False)
    event_ms = statistics.median(s.elapsed_time(e) for s, e in events)
    gemm = [d for name, d in kernels if "gemm" in name.lower() or "cutlass" in name.lower() or "sm90" in name]
    names = sorted({name for name, _ in kernels})
    cupti_ms = statistics.median(gemm) / 1e6 if gemm else None
    result["durations"] = {"kernel_names": names[:5], "kernels": len(kernels), "gemm_records": len(gemm),
                           "cuda_event_median_ms": event_ms, "cupti_median_ms": cupti_ms,
                           "ratio": (cupti_ms / event_ms) if cupti_ms else None}

    # 3. throughput with and without collection, alternating
    def timed(fn: Any, on: bool, which: tuple[Any, ...] = kinds) -> float:
        collect(on, which)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if on:
            cupti.activity_flush_all(1)
            collect(False)
        return dt

    # (kernels and runtime API calls, as issue 15's probe would record; then kernels alone, to split the cost)
    for name, fn in (("train_like", train_like), ("tiny_kernels", tiny_kernels)):
        for label, which in (("kernels+runtime", kinds), ("kernels", kinds[:1])):
            off, on = [], []
            for _ in range(ROUNDS):
                off.append(timed(fn, False))
                kernels.clear()
                on.append(timed(fn, True, which))
            result[f"{name} {label}"] = {
                "off_s": off, "on_s": on, "overhead_best": min(on) / min(off) - 1.0,
                "overhead_median": statistics.median(on) / statistics.median(off) - 1.0,
                "kernels_recorded_last_round": len(kernels)}
    result["runtime_calls_recorded"] = runtime_calls[0]
    text = json.dumps(result, indent=1)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cupti-check.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
