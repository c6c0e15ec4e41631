"""Render a simulated fleet's records on fake time: an hour of 8 GPUs in seconds.

Used by the codec benchmark (the "simulated fleet trace") and by tests that need
realistic record streams. The records come through the real sampler, so they have what
the agent would send, processes and all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from agent.devices import discover
from agent.driver.simulated import Profile, SimulatedFleet
from agent.sampler import Sampler
from agent.simulate.attribution import SimulatedAttribution
from telemetry.records import GpuRecord

T0 = 1764489600.0  # 2025-11-30T08:00:00Z, a fixed start so traces are reproducible


def generate_trace(
    gpus: int,
    seconds: float,
    interval: float = 1.0,
    seed: int = 0,
    node: str = "sim-node-00",
    profiles: Sequence[Profile] | None = None,
    start: float = T0,
) -> Iterator[GpuRecord]:
    """Records of every GPU every ``interval`` seconds, ordered by time."""
    now = start
    fleet = SimulatedFleet(gpus, seed=seed, clock=lambda: now, profiles=profiles, start=start)
    fleet.init()
    sampler = Sampler(fleet, node, fleet.driver_version(), SimulatedAttribution(fleet).identify)
    targets = discover(fleet)
    steps = int(seconds / interval)
    for step in range(steps):
        now = start + step * interval
        for t in targets:
            yield sampler.sample(t, now)
