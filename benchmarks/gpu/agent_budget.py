"""The agent's CPU budget on a real GPU: busy neighbours in the same process must not thin sampling.

Runs the agent in this process on NVML (or ``--simulate N``) three times for ``--seconds``:

1. ``quiet``: the agent alone, its /metrics scraped every 15 s (the baseline);
2. ``busy``: the same, plus a pure-Python CPU hog thread in the process (what the API and
   collector are to the agent in ``gpuwatch up``: it competes for the GIL as well as the core)
   and a thread scraping /metrics as fast as it answers;
3. ``busy, budget on the process``: as 2, with the budget reading the whole process's CPU time
   as the agent did before (``budget_cpu_clock=time.process_time``). The stretch it reaches is
   what the issue saw; its gaps stop at the ceiling only because the ceiling now holds whatever
   the budget says (before, they did not: 100-826 s in ``up``).

For each: samples per GPU, the longest gap between two samples of a GPU against the ceiling,
the budget's stretch, and CPU as a share of one core: the agent's sampling threads (what the
budget governs), its HTTP requests, and the whole process.

    python3 benchmarks/gpu/agent_budget.py --seconds 60 --json "$OUT/agent-budget.json"
    python3 benchmarks/gpu/agent_budget.py --simulate 8 --seconds 30          # without a GPU
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cpuclock import HTTP, SAMPLING
from agent.exposition import Exposition
from agent.runtime import Agent, ScheduleConfig
from agent.server import MetricsServer
from benchmarks.report import finish
from telemetry.records import GpuRecord


def _driver(simulate: int) -> Any:
    if simulate:
        from agent.driver.simulated import SimulatedFleet

        return SimulatedFleet(simulate, profiles=["idle", "training", "serving", "idle"])
    from agent.driver.nvml import NvmlDriver

    return NvmlDriver()


def _hog(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x ^= i * i


def _scraper(url: str, stop: threading.Event, count: list[int]) -> None:
    while not stop.is_set():
        with urllib.request.urlopen(url, timeout=10) as resp:
            resp.read()
        count[0] += 1


def run(name: str, args: argparse.Namespace, busy: bool, budget_clock: Callable[[], float] | None) -> dict[str, Any]:
    config = ScheduleConfig(ceiling=args.ceiling, cpu_budget=args.cpu_budget)
    seen: dict[str, list[float]] = defaultdict(list)

    def sink(r: GpuRecord) -> None:
        seen[r.gpu].append(r.ts)

    agent = Agent(_driver(args.simulate), platform.node(), config, budget_cpu_clock=budget_clock,
                  record_sinks=(sink,))
    agent.open()
    server = MetricsServer("127.0.0.1", 0, Exposition(agent))
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    stop = threading.Event()
    scrapes = [0]
    helpers = [threading.Thread(target=_hog, args=(stop,), daemon=True),
               threading.Thread(target=_scraper, args=(url, stop, scrapes), daemon=True)] if busy else []
    agent.start()
    agent.ready.wait(30)
    cpu0, sampling0, http0 = time.process_time(), agent.cpu.seconds(SAMPLING), agent.cpu.seconds(HTTP)
    t0 = time.time()
    for th in helpers:
        th.start()
    max_stretch = 1.0
    next_scrape = time.monotonic()
    while (now := time.time()) < t0 + args.seconds:
        if not busy and time.monotonic() >= next_scrape:  # a Prometheus-like scrape every 15 s
            with urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
            next_scrape += 15
        max_stretch = max(max_stretch, agent.budget.stretch)
        time.sleep(min(0.5, t0 + args.seconds - now))
    t1 = time.time()
    wall = t1 - t0
    cpu, sampling, http = (time.process_time() - cpu0, agent.cpu.seconds(SAMPLING) - sampling0,
                           agent.cpu.seconds(HTTP) - http0)
    stop.set()
    for th in helpers:
        th.join(10)
    server.stop()
    agent.stop()
    gaps = {g: max(b - a for a, b in zip([t0, *[t for t in ts if t0 <= t <= t1]],
                                         [*[t for t in ts if t0 <= t <= t1], t1], strict=True))
            for g, ts in seen.items()}
    in_run = sum(1 for ts in seen.values() for t in ts if t0 <= t <= t1)
    return {
        "run": name, "gpus": len(seen), "seconds": round(wall, 1), "ceiling_s": args.ceiling,
        "samples_per_gpu": round(in_run / max(1, len(seen)), 1), "max_gap_s": round(max(gaps.values()), 2),
        "max_stretch": round(max_stretch, 2), "budget_stretched_samples": agent.budget_stretched_total,
        "sampling_cpu_pct": round(100 * sampling / wall, 3), "http_cpu_pct": round(100 * http / wall, 3),
        "process_cpu_pct": round(100 * cpu / wall, 1), "cpu_budget_pct": 100 * args.cpu_budget,
        "busy_scrapes": scrapes[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--simulate", type=int, default=0, help="simulate N GPUs instead of NVML")
    parser.add_argument("--ceiling", type=float, default=10.0)
    parser.add_argument("--cpu-budget", type=float, default=0.01)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    runs = [run("quiet", args, busy=False, budget_clock=None),
            run("busy", args, busy=True, budget_clock=None),
            run("busy, budget on the process (the old measure)", args, busy=True, budget_clock=time.process_time)]
    quiet, busy, before = runs
    result = {
        "runs": runs,
        "samples_busy_over_quiet": round(busy["samples_per_gpu"] / quiet["samples_per_gpu"], 3),
        "samples_busy_over_process_budget": round(busy["samples_per_gpu"] / max(0.1, before["samples_per_gpu"]), 2),
    }
    finish(result, args.json)


if __name__ == "__main__":
    main()
