"""Agent overhead: CPU per GPU-sample against the NVML floor, and RSS over an accelerated hour.

``cpu``: runs the real agent (threads, HTTP server, a Prometheus-like scrape every 15 s)
at a fixed 1 Hz per GPU for ``--seconds``, and reports

* the agent process's CPU time (user + system) per GPU-sample and as % of one core;
* the NVML floor measured in the same run: the summed wall time of the driver calls
  the sampler made (timed around each call), per GPU-sample;
* a raw-loop floor measured right after, in the same process: the same driver calls in a
  tight loop with no agent around them, CPU time per GPU-sample;
* the ratios of the agent's CPU to both floors.

``rss``: drives the agent on fake time through ``--hours`` of 8 GPUs at 1 Hz (batch jobs
come and go, so pids, pods and label sets churn), renders /metrics every simulated 15 s,
and samples the resident set size every simulated minute.

    python benchmarks/bench_agent.py cpu --simulate 8 --seconds 60
    python benchmarks/bench_agent.py cpu --real --seconds 60        # on a GPU node
    python benchmarks/bench_agent.py rss --hours 1
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pynvml as nv

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.driver.base import Driver
from agent.exposition import Exposition
from agent.readers import READERS
from agent.runtime import Agent, ScheduleConfig
from agent.server import MetricsServer
from benchmarks.report import finish


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _driver(args: argparse.Namespace) -> tuple[Driver, Any]:
    if args.real:
        from agent.driver.nvml import NvmlDriver

        return NvmlDriver(), None
    from agent.driver.simulated import SimulatedFleet
    from agent.simulate.attribution import SimulatedAttribution

    fleet = SimulatedFleet(args.simulate, profiles=["training", "serving", "batch", "training"])
    return fleet, SimulatedAttribution(fleet)


def raw_floor(agent: Agent, iterations: int) -> dict[str, float]:
    """The same driver calls as one GPU-sample, in a tight loop: CPU and wall seconds per sample."""
    d = agent.driver
    scratch: dict[str, float] = {}
    targets = [t for t in agent.targets.values() if t.healthy]
    slow = agent.slow_period
    cpu0, wall0 = time.process_time(), time.perf_counter()
    n = 0
    for i in range(iterations):
        for t in targets:
            h = t.handle
            for source in t.sources:
                # a slow source costs its share: once every period/1 s samples
                if source in slow and i % max(1, round(slow[source])) != 0:
                    continue
                READERS[source](d, h, scratch)
            if t.gpm is not None:
                d.gpm_sample(h, t.gpm.buffers[i % 2])
            if t.processes:
                procs = d.compute_processes(h)
                util_due = "process_utilization" not in slow or i % max(1, round(slow["process_utilization"])) == 0
                if procs and util_due:
                    with contextlib.suppress(nv.NVMLError_NotFound):  # as in the agent
                        d.process_utilization(h, 0)
            n += 1
    return {
        "cpu_per_sample_s": (time.process_time() - cpu0) / n,
        "wall_per_sample_s": (time.perf_counter() - wall0) / n,
    }


def bench_cpu(args: argparse.Namespace) -> dict[str, Any]:
    driver, attribution = _driver(args)
    config = ScheduleConfig(floor=1.0, ceiling=1.0, busy=1.0, cpu_budget=1.0)
    agent = Agent(driver, platform.node(), config, attribution)
    agent.open()
    server = MetricsServer("127.0.0.1", 0, Exposition(agent))
    server.start()
    agent.start()
    agent.ready.wait(30)
    time.sleep(2.0)  # settle: first GPM pair, caches warm
    assert agent.sampler is not None
    samples0, nvml0 = agent.samples_total, agent.sampler.stats.total_ns
    cpu0, wall0, rss0 = time.process_time(), time.perf_counter(), _rss_mib()
    scrapes = 0
    deadline = wall0 + args.seconds
    while (now := time.perf_counter()) < deadline:
        time.sleep(min(15.0, deadline - now))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as resp:
            resp.read()
        scrapes += 1
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    samples = agent.samples_total - samples0
    nvml_in_run = (agent.sampler.stats.total_ns - nvml0) * 1e-9
    calls = agent.sampler.stats.mean_latency()
    agent.stop()
    server.stop()
    agent_for_floor = Agent(driver, "floor", config, None, calibrate_calls=False)
    agent_for_floor.open()
    agent_for_floor.slow_period = agent.slow_period
    floor = raw_floor(agent_for_floor, args.floor_iterations)
    agent_for_floor.stop()
    per_sample = cpu / samples
    return {
        "mode": "real" if args.real else f"simulated x{args.simulate}",
        "gpus": len(agent.targets),
        "seconds": round(wall, 1),
        "samples": samples,
        "scrapes": scrapes,
        "agent_cpu_core_pct": round(100 * cpu / wall, 4),
        "agent_cpu_per_sample_us": round(per_sample * 1e6, 1),
        "nvml_in_run_per_sample_us": round(nvml_in_run / samples * 1e6, 1),
        "raw_loop_cpu_per_sample_us": round(floor["cpu_per_sample_s"] * 1e6, 1),
        "raw_loop_wall_per_sample_us": round(floor["wall_per_sample_s"] * 1e6, 1),
        "ratio_to_in_run_nvml": round(per_sample / (nvml_in_run / samples), 2),
        "ratio_to_raw_loop_cpu": round(per_sample / floor["cpu_per_sample_s"], 2),
        "slow_calls": {k: round(v, 2) for k, v in agent.slow_period.items()},
        "call_latency_us": {k: round(v * 1e6, 1) for k, v in sorted(calls.items())},
        "rss_mib": round(rss0, 1),
    }


def bench_rss(args: argparse.Namespace) -> dict[str, Any]:
    from agent.driver.simulated import SimulatedFleet
    from agent.simulate.attribution import SimulatedAttribution

    now = [1_764_489_600.0]
    fleet = SimulatedFleet(8, clock=lambda: now[0], profiles=["batch", "serving", "training", "batch"])
    config = ScheduleConfig(floor=1.0, ceiling=1.0, busy=1.0, cpu_budget=1.0)
    sink_count = [0]
    agent = Agent(fleet, "rss-node", config, SimulatedAttribution(fleet), clock=lambda: now[0],
                  calibrate_calls=False, record_sinks=(lambda r: sink_count.__setitem__(0, sink_count[0] + 1),))
    agent.open()
    exposition = Exposition(agent)
    end = now[0] + args.hours * 3600
    next_scrape = next_rss = now[0]
    points: list[tuple[float, float]] = []
    t_start = now[0]
    wall0 = time.perf_counter()
    while now[0] < end:
        nxt = agent.step(now[0])
        if now[0] >= next_scrape:
            exposition.render()
            next_scrape += 15
        if now[0] >= next_rss:
            points.append(((now[0] - t_start) / 60, _rss_mib()))
            next_rss += 60
        now[0] = nxt if nxt is not None else now[0] + 1
    wall = time.perf_counter() - wall0
    rss = [r for _, r in points]
    half = len(rss) // 2
    return {
        "simulated_hours": args.hours,
        "wall_seconds": round(wall, 1),
        "samples": sink_count[0],
        "rss_start_mib": round(rss[0], 1),
        "rss_after_5min_mib": round(rss[min(5, len(rss) - 1)], 1),
        "rss_max_mib": round(max(rss), 1),
        "rss_end_mib": round(rss[-1], 1),
        "rss_second_half_growth_mib": round(max(rss[half:]) - min(rss[half:]), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="what", required=True)
    cpu = sub.add_parser("cpu")
    cpu.add_argument("--simulate", type=int, default=8)
    cpu.add_argument("--real", action="store_true")
    cpu.add_argument("--seconds", type=float, default=60.0)
    cpu.add_argument("--floor-iterations", type=int, default=300)
    rss = sub.add_parser("rss")
    rss.add_argument("--hours", type=float, default=1.0)
    for p in (cpu, rss):
        p.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = bench_cpu(args) if args.what == "cpu" else bench_rss(args)
    finish(result, args.json)


if __name__ == "__main__":
    main()
