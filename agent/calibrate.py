"""Start-up measurement of each driver call's latency on this node's GPUs.

The schedule depends on what calls really cost here: on an H200 most took 1-10 µs, the
energy counter ~4 ms, PCIe throughput ~20 ms (it samples for 20 ms) and a GPM sample
~0.75 ms. Measuring rather than assuming lets the same agent run well on other models
and drivers. PCIe throughput is measured only to report it: the agent never polls it,
since GPM's PCIe metrics replace it at no extra cost.
"""

from __future__ import annotations

import logging
import statistics
import time

import pynvml as nv

from agent.devices import GpuTarget
from agent.driver.base import Driver
from agent.readers import READERS

log = logging.getLogger(__name__)


def _median_call(fn: object, repeats: int) -> float | None:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        try:
            fn()  # type: ignore[operator]
        except nv.NVMLError:
            return None
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def measure(driver: Driver, target: GpuTarget, repeats: int = 5) -> dict[str, float]:
    """Median latency (seconds) of each supported call on one GPU."""
    h = target.handle
    scratch: dict[str, float] = {}
    out: dict[str, float] = {}
    for source in target.sources:
        reader = READERS[source]
        latency = _median_call(lambda r=reader: r(driver, h, scratch), repeats)
        if latency is not None:
            out[source] = latency
    if target.gpm is not None:
        sample = driver.gpm_alloc()
        latency = _median_call(lambda: driver.gpm_sample(h, sample), repeats)
        if latency is not None:
            out["gpm"] = latency
    for name, fn in (
        ("compute_processes", lambda: driver.compute_processes(h)),
        ("process_utilization", lambda: driver.process_utilization(h, 0)),  # NotFound when idle: skipped
        ("pcie_throughput", lambda: driver.pcie_throughput(h)),
    ):
        latency = _median_call(fn, 1 if name == "pcie_throughput" else repeats)
        if latency is not None:
            out[name] = latency
    log.info(
        "driver call latency on %s: %s", target.key,
        ", ".join(f"{k}={v * 1e6:.0f}µs" for k, v in sorted(out.items(), key=lambda kv: -kv[1])),
    )
    return out
