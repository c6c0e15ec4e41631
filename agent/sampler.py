"""Sampling one GPU target into a :class:`telemetry.records.GpuRecord`: the agent's hot path.

Per sample: the fast readers, any slow readers that are due, one GPM sample, the last
XID, the process list with per-process utilisation and attribution, and the host
evidence of those processes (:mod:`agent.host`, its CPU time inside the sample's). Every driver
call is timed (two ``perf_counter_ns`` calls, ~0.1 µs, against 1-10 µs NVML calls), which
gives the live NVML latency metric and the "NVML floor" the overhead is compared with.

A source that starts answering ``NotSupported`` is dropped for that GPU. ``GpuIsLost``
propagates to the caller, which marks the GPU unhealthy and retries it later, while the
other GPUs keep being sampled.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pynvml as nv

from agent.devices import GpuTarget
from agent.driver.base import Driver
from agent.host import HostReader
from agent.readers import READERS
from telemetry.catalog import HOST_KEYS
from telemetry.keys import XID_ERRORS
from telemetry.records import GpuRecord, ProcessRecord

log = logging.getLogger(__name__)
MIB = 1 << 20


@dataclass(slots=True)
class CallStats:
    """Time spent in each driver call and how often it ran (cumulative, like a summary).

    Kept as ``[nanoseconds, calls]`` pairs mutated in place: two integer additions per
    call on the hot path; averages are derived at scrape time.
    """

    acc: dict[str, list[int]] = field(default_factory=dict)

    def add(self, source: str, ns: int) -> None:
        pair = self.acc.get(source)
        if pair is None:
            self.acc[source] = [ns, 1]
        else:
            pair[0] += ns
            pair[1] += 1

    @property
    def total_ns(self) -> int:
        """Summed driver time: the NVML floor of what was sampled."""
        return sum(ns for ns, _ in self.acc.values())

    def mean_latency(self) -> dict[str, float]:
        return {k: ns * 1e-9 / n for k, (ns, n) in self.acc.items() if n}


class Identity(Protocol):
    """What the sampler reads of a process's identity (agent.attribution.Identity has it)."""

    @property
    def name(self) -> str | None: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def pod(self) -> str | None: ...
    @property
    def container(self) -> str | None: ...
    @property
    def service(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Anonymous:
    """The identity of a process when nothing better is known."""

    name: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service: str | None = None


IdentifyFn = Callable[[int], Identity]
#: adds figures that do not come from the driver to a GPU's metrics before its record is made
#: (the inference servers' of the pod holding it: agent.inference.scraper.InferenceScraper.add_to)
EnrichFn = Callable[[GpuTarget, Sequence[ProcessRecord], dict[str, float]], None]


def anonymous(_pid: int) -> Identity:
    return Anonymous()


@dataclass(slots=True)
class Sampler:
    driver: Driver
    node: str
    driver_version: str
    identify: IdentifyFn = anonymous
    stats: CallStats = field(default_factory=CallStats)
    errors: Counter[str] = field(default_factory=Counter)
    xid: dict[str, int] = field(default_factory=dict)  # last XID per GPU UUID (event thread)
    slow: frozenset[str] = frozenset()  # sources on their own period (set by the agent)
    host: HostReader | None = None  # the host evidence (agent.host); None: off
    enrich: EnrichFn | None = None
    _proc_since_us: dict[str, int] = field(default_factory=dict)
    _last_util: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)

    def sample(self, t: GpuTarget, now: float, slow_due: frozenset[str] = frozenset()) -> GpuRecord:
        driver, h, stats = self.driver, t.handle, self.stats
        metrics: dict[str, float] = {}
        clock = time.perf_counter_ns
        slow = self.slow
        for source in t.sources:
            if source in slow and source not in slow_due:
                continue
            t0 = clock()
            try:
                READERS[source](driver, h, metrics)
            except nv.NVMLError_NotSupported:
                t.sources = [s for s in t.sources if s != source]
                log.info("%s stopped supporting %s; dropped", t.key, source)
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError as exc:
                self.errors[f"{source}:{exc.__class__.__name__}"] += 1
            stats.add(source, clock() - t0)
        if t.gpm is not None:
            t0 = clock()
            try:
                t.gpm.sample(driver, h, now, metrics)
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError as exc:
                self.errors[f"gpm:{exc.__class__.__name__}"] += 1
            stats.add("gpm", clock() - t0)
        if t.parent is None:  # XIDs belong to the physical GPU, not to a MIG instance
            metrics[XID_ERRORS] = self.xid.get(t.key, 0)
        processes = self._processes(t, "process_utilization" not in self.slow or "process_utilization" in slow_due) \
            if t.processes else []
        if self.host is not None:
            self.host.read(t.key, [p.pid for p in processes], now, metrics)
            for key in HOST_KEYS:  # absent now (a process left, a first reading): not its old value
                if key not in metrics:
                    t.last_metrics.pop(key, None)
        if self.enrich is not None:
            self.enrich(t, processes, metrics)
        t.last_metrics.update(metrics)
        return GpuRecord(
            ts=now, node=self.node, gpu=t.key, metrics=metrics, gpu_index=t.index, model=t.model,
            processes=processes, pci_bus_id=t.pci_bus_id, driver_version=self.driver_version,
            mig_profile=t.mig_profile, parent_gpu=t.parent,
        )

    def _processes(self, t: GpuTarget, read_util: bool) -> list[ProcessRecord]:
        driver, h, clock = self.driver, t.handle, time.perf_counter_ns
        t0 = clock()
        try:
            running = driver.compute_processes(h)
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:
            self.errors[f"processes:{exc.__class__.__name__}"] += 1
            running = []
        self.stats.add("compute_processes", clock() - t0)
        if not running:
            return []
        util = self._last_util.get(t.key, {})
        if read_util or any(p.pid not in util for p in running):  # a new process is read at once
            util = self._process_utilization(t)
            self._last_util[t.key] = util
        out = []
        for p in running:
            who = self.identify(p.pid)
            sm_mem = util.get(p.pid)
            out.append(ProcessRecord(
                pid=p.pid, name=who.name,
                used_memory_mib=None if p.used_bytes is None else -(-p.used_bytes // MIB),
                sm_util=None if sm_mem is None else sm_mem[0],
                mem_util=None if sm_mem is None else sm_mem[1],
                namespace=who.namespace, pod=who.pod, container=who.container, service=who.service,
            ))
        return out

    def _process_utilization(self, t: GpuTarget) -> dict[int, tuple[int, int]]:
        """Latest (SM %, memory %) per pid. Under load this call took ~2 ms on an H200, so it
        can be put on a slow period; between reads the last values stand for running pids."""
        util: dict[int, tuple[int, int]] = {}
        seen: dict[int, int] = {}
        t0 = time.perf_counter_ns()
        try:
            # ask from 1 s before the newest sample seen: a fast schedule still finds the
            # latest sample of each process instead of NotFound between driver updates
            since = max(0, self._proc_since_us.get(t.key, 0) - 1_000_000)
            for s in self.driver.process_utilization(t.handle, since):
                if s.timestamp_us >= seen.get(s.pid, -1):
                    seen[s.pid] = s.timestamp_us
                    util[s.pid] = (s.sm_util, s.mem_util)
            if seen:
                self._proc_since_us[t.key] = max(seen.values())
        except (nv.NVMLError_NotFound, nv.NVMLError_NotSupported):
            pass  # no process sample since the last call: NVML says NotFound, not []
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:
            self.errors[f"process_utilization:{exc.__class__.__name__}"] += 1
        self.stats.add("process_utilization", time.perf_counter_ns() - t0)
        return util
