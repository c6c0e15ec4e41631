"""What clock a GPU holds at its power cap, kernel mix by kernel mix.

Run on the GPU machine (PyTorch present)::

    python3 benchmarks/gpu/power_mix.py [--seconds 20] [--json out.json]

Why: the power-throttle detector (collector/detect/throttle.py) learns the clock a job holds
at its full rated power and calls a clock far below it a fault. Whether a change of kernel
mix alone moves that clock, and by how much, decides how far below is "far": an independently
written fleet's batch job held 1,870 MHz at the cap in a memory-bound phase and 1,485 in a
tensor-heavy one. This runs each mix flat out (one kernel after another, no host gaps) for
``--seconds`` and reads nvidia-smi every 0.25 s beside it: power, SM clock, clock-event
reasons, die temperature, utilisation. It prints the median of each, per mix, after a 4-s
settle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

QUERY = "timestamp,power.draw,power.limit,clocks.sm,clocks_event_reasons.active,temperature.gpu,utilization.gpu"


def _sampler(rows: list[tuple[float, list[str]]], stop: threading.Event) -> None:
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "250",
                             "-i", "0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        rows.append((time.time(), [x.strip() for x in line.split(",")]))
        if stop.is_set():
            break
    proc.terminate()


def _mixes() -> dict[str, Callable[[], None]]:
    import torch

    dev = torch.device("cuda")
    out: dict[str, Callable[[], None]] = {}
    a16 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    h16 = a16.half()
    a32 = a16.float()
    s16 = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    big = torch.ones(4 * 2**30, dtype=torch.bfloat16, device=dev)

    def fp32() -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        a32 @ a32

    def tf32() -> None:
        torch.backends.cuda.matmul.allow_tf32 = True
        a32 @ a32

    out["bf16_8192"] = lambda: (a16 @ b16, None)[1]
    out["fp16_8192"] = lambda: (h16 @ h16, None)[1]
    out["tf32_8192"] = tf32
    out["fp32_8192"] = fp32
    out["bf16_2048"] = lambda: (s16 @ s16, None)[1]
    out["elementwise_8gib"] = lambda: (big.mul_(1.0001), None)[1]
    out["mixed_bf16_elementwise"] = lambda: (a16 @ b16, big.mul_(1.0001), None)[2]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--json", help="write the per-mix medians here")
    args = p.parse_args()
    import torch

    mixes = _mixes()
    rows: list[tuple[float, list[str]]] = []
    stop = threading.Event()
    th = threading.Thread(target=_sampler, args=(rows, stop), daemon=True)
    th.start()
    time.sleep(3.0)
    spans: dict[str, tuple[float, float]] = {}
    for name, fn in mixes.items():
        began = time.time()
        while time.time() < began + args.seconds:
            for _ in range(8):
                fn()
            torch.cuda.synchronize()
        spans[name] = (began + 4.0, time.time())
        time.sleep(2.0)
    stop.set()
    time.sleep(0.5)
    result: dict[str, Any] = {}
    for name, (a, b) in spans.items():
        got = [r for t, r in rows if a <= t < b]

        def med(i: int, got: list[list[str]] = got) -> float | None:
            vals = []
            for r in got:
                try:
                    vals.append(float(r[i]) if not r[i].startswith("0x") else float(int(r[i], 16)))
                except (ValueError, IndexError):
                    continue
            return statistics.median(vals) if vals else None

        result[name] = {"samples": len(got), "power_w": med(1), "limit_w": med(2), "sm_clock_mhz": med(3),
                        "reasons": med(4), "temp_c": med(5), "util_pct": med(6)}
        print(f"{name:24} {json.dumps(result[name])}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"gpu": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                             capture_output=True, text=True).stdout.strip(), "mixes": result}, fh,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
