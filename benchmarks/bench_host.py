"""The host evidence's cost: the agent's CPU per GPU-sample with it on against off, in one run.

Issue 14's target is at most +15%. Two agents run side by side in this process on the
simulated driver (8 GPUs, fake wall time at 1 Hz per GPU, so each step samples all eight
in one tick), alternating in short rounds so that machine noise falls on both alike; one
has a :class:`agent.host.HostReader`, the other none. The simulated GPUs' processes are
remapped to real processes of this machine started here (Python children with a few
threads each, sleeping), so the reader reads real /proc, cgroup and PSI files. The cost
per GPU-sample is the sampling thread's CPU time (``time.thread_time``) around each
sample, as the agent's budget measures it.

Two layouts: ``shared`` (3 processes over the 8 GPUs, as multi-GPU jobs and the
simulated fleet's serving replicas have them) and ``per-gpu`` (a process of its own on
every GPU, the most files per tick).

    python benchmarks/bench_host.py --rounds 40 --steps 50
    python benchmarks/bench_host.py --nvml --rounds 20 --steps 10   # the real GPUs and their real processes

With ``--nvml`` both agents sample this machine's real GPUs through NVML (the processes NVML
lists are read on the host as in production), so the ratio has the real denominator: a GPU
machine with a job running.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.driver.base import Handle, ProcessInfo, ProcessUtil
from agent.driver.simulated import SimulatedFleet
from agent.host import HostReader
from agent.runtime import Agent, ScheduleConfig
from agent.simulate.attribution import SimulatedAttribution
from benchmarks.report import finish

GPUS = 8
_CHILD = ("import threading, time\n"
          "for _ in range(3): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
          "time.sleep(3600)")


class RealPids(SimulatedFleet):
    """The simulated fleet, its processes shown as real pids of this machine (one list per GPU index)."""

    def __init__(self, pids: list[list[int]], clock: Any) -> None:
        super().__init__(GPUS, clock=clock, start=0.0)
        self.pids = pids

    def _real(self, h: Handle, i: int) -> int:
        mine = self.pids[h.index % len(self.pids)]
        return mine[i % len(mine)]

    def compute_processes(self, h: Handle) -> list[ProcessInfo]:
        return [ProcessInfo(self._real(h, i), p.used_bytes) for i, p in enumerate(super().compute_processes(h))]

    def process_utilization(self, h: Handle, since_us: int) -> list[ProcessUtil]:
        return [p._replace(pid=self._real(h, i)) for i, p in enumerate(super().process_utilization(h, since_us))]


def _agent(pids: list[list[int]], now: list[float], host: bool) -> Agent:
    fleet = RealPids(pids, lambda: now[0])
    config = ScheduleConfig(floor=1.0, ceiling=1.0, busy=1.0, cpu_budget=1.0)  # 1 Hz, whatever the GPUs do
    agent = Agent(fleet, "bench", config, SimulatedAttribution(fleet), clock=lambda: now[0], calibrate_calls=False,
                  host=HostReader() if host else None)
    agent.open()
    return agent


def _nvml_agent(now: list[float], host: bool) -> Agent:
    from agent.driver.nvml import NvmlDriver

    config = ScheduleConfig(floor=1.0, ceiling=1.0, busy=1.0, cpu_budget=1.0)
    agent = Agent(NvmlDriver(), "bench", config, None, clock=lambda: now[0], calibrate_calls=False,
                  host=HostReader() if host else None)
    agent.open()
    return agent


def measure(pids: list[list[int]] | None, rounds: int, steps: int) -> dict[str, Any]:
    now = [1000.0]
    if pids is None:
        agents = {"off": _nvml_agent(now, False), "on": _nvml_agent(now, True)}
    else:
        agents = {"off": _agent(pids, now, False), "on": _agent(pids, now, True)}
    for a in agents.values():  # warm up: first readings, caches, open files
        a.step(now[0])
    cpu = dict.fromkeys(agents, 0.0)
    samples = dict.fromkeys(agents, 0)
    for r in range(rounds):
        order = list(agents) if r % 2 else list(reversed(agents))
        for name in order:
            a = agents[name]
            c0, n0 = a.sample_cpu_seconds, a.samples_total
            t = now[0]
            for _ in range(steps):
                t += 1.0
                now[0] = t
                a.step(t)
            cpu[name] += a.sample_cpu_seconds - c0
            samples[name] += a.samples_total - n0
    host = agents["on"].host
    out = {name: {"samples": samples[name], "cpu_us_per_gpu_sample": round(1e6 * cpu[name] / samples[name], 1)}
           for name in agents}
    out["ratio_on_off"] = round(out["on"]["cpu_us_per_gpu_sample"] / out["off"]["cpu_us_per_gpu_sample"], 3)
    out["host_errors"] = dict(host.errors) if host is not None else {}
    record = agents["on"].latest[next(iter(agents["on"].targets))]
    out["host_rows_in_a_record"] = sorted(k for k in record.metrics if k.startswith("gpuwatch_"))
    for a in agents.values():
        a.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40, help="alternating rounds (default 40)")
    p.add_argument("--steps", type=int, default=50, help="ticks of 8 GPU-samples per agent per round (default 50)")
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--nvml", action="store_true", help="the real GPUs through NVML and the processes on them")
    args = p.parse_args()
    if args.nvml:
        result_nvml: dict[str, Any] = {"benchmark": "host evidence on vs off, agent CPU per GPU-sample, real NVML",
                                       "rounds": args.rounds, "steps": args.steps, "nvml": measure(None, args.rounds,
                                                                                                  args.steps)}
        finish(result_nvml, args.json)
        return
    children = [subprocess.Popen([sys.executable, "-c", _CHILD]) for _ in range(GPUS)]
    try:
        time.sleep(0.5)  # the children's threads exist
        pids = [c.pid for c in children]
        result: dict[str, Any] = {"benchmark": "host evidence on vs off, agent CPU per GPU-sample", "gpus": GPUS,
                                  "process_threads": 4, "rounds": args.rounds, "steps": args.steps}
        result["shared"] = measure([pids[:1], pids[1:2], pids[2:3]], args.rounds, args.steps)  # 3 processes, 8 GPUs
        result["per_gpu"] = measure([[pid] for pid in pids], args.rounds, args.steps)
    finally:
        for c in children:
            c.kill()
            c.wait()
    finish(result, args.json)


if __name__ == "__main__":
    main()
