"""The host reader: each GPU record's host evidence, as rates over the GPU's own interval.

Why it is shaped so: the sampler asks once per GPU per sample, and the scheduler samples
the GPUs that are due at one ``now`` together (a tick). So each process, each cgroup and
the node files are read at most once per tick, whatever the number of GPUs that share them,
and kept as cumulative readings; each GPU keeps the readings it last used, and its rates
are the change since its own previous sample over the time between the two reads (the
contract's "interval since the GPU's previous sample"). Summing rates per process (rather
than counters over a changing set of processes) survives churn: a process new since the
GPU's previous sample, or a pid reused by another process (its start time differs),
contributes from its second reading; a value with nothing to compare against is absent,
never 0. GPUs with the same processes whose previous samples were on the same tick get the
same rows, computed once. A process's threads are not all read on every tick
(:mod:`agent.host.threads`): the thread rows mix the tracked threads' rates over the GPU's
interval with the others' over the last full pass (at most ``full_every_s`` old).

Nothing here raises into sampling: a file that cannot be read (the process exited, no
permission, no PSI on this kernel) leaves its values absent, is counted in ``errors`` (the
agent's ``gpuwatch_agent_errors{kind="host_..."}``) and logged on one rate-limited line. A
kernel without PSI, or a /proc without stat, is noted once and not asked again.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agent.host.cgroup import CgroupDirs, CgroupReading, locate, read_cgroup
from agent.host.files import OpenFiles
from agent.host.node import PSI_RESOURCES, CpuTimes, read_cpu_times, read_pressure
from agent.host.threads import FULL_EVERY_S, TRACK, ProcessReading, Threads
from telemetry import keys as k
from telemetry.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

_PSI_KEYS = {
    "cpu": k.NODE_PRESSURE_CPU_WAITING_RATIO,
    "memory": k.NODE_PRESSURE_MEMORY_WAITING_RATIO,
    "io": k.NODE_PRESSURE_IO_WAITING_RATIO,
}
#: a kernel without PSI has no /proc/pressure (ENOENT); one booted with psi=0 refuses it (EOPNOTSUPP)
_NO_PSI = frozenset({errno.ENOENT, errno.EOPNOTSUPP, errno.EACCES})
_CGROUP_CACHE_MAX = 4096  # pids whose cgroup directories are remembered (a process's cgroup is fixed)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


@dataclass(slots=True)
class _Node:
    cpu: CpuTimes | None
    psi: dict[str, float]


@dataclass(slots=True)
class _Seen:
    """What one GPU's previous sample read (its base for the next rates)."""

    tick: int  # the reader's tick serial number
    t: float
    procs: dict[int, ProcessReading] = field(default_factory=dict)
    cgroups: dict[str, CgroupReading] = field(default_factory=dict)
    node: _Node | None = None


class HostReader:
    """Adds the catalog's host rows to each GPU's metrics (see the module docstring).

    ``processes=False`` reads only the node's files (the simulated driver's pids are not
    processes of this machine). ``clock`` is read once per tick: the rates' wall time."""

    def __init__(
        self,
        proc_root: str = "/proc",
        cgroup_root: str = "/sys/fs/cgroup",
        *,
        processes: bool = True,
        clock: Callable[[], float] = time.monotonic,
        log_every_s: float = 60.0,
        max_open_files: int = 512,
        full_every_s: float = FULL_EVERY_S,
        track_threads: int = TRACK,
    ) -> None:
        self.proc_root = proc_root.rstrip("/") or "/"
        self.cgroup_root = cgroup_root
        self.processes = processes
        self.clock = clock
        self.errors: Counter[str] = Counter()
        self._log = RateLimitedLog(log, every_s=log_every_s)
        self.files = OpenFiles(max_open_files, clock=clock)
        self.threads = Threads(full_every_s, track_threads)
        self._tick: float | None = None
        self._now = 0.0
        self._t = 0.0
        self._serial = 0
        self._pruned = float("-inf")
        self._limits: dict[str, tuple[float, float | None]] = {}  # cgroup -> (when read, its CPU limit)
        self._done: dict[tuple[int, frozenset[int]], tuple[_Seen, dict[str, float]]] = {}
        self._procs: dict[int, ProcessReading | None] = {}
        self._cgroups: dict[str, CgroupReading | None] = {}
        self._node: _Node | None = None
        self._dirs: dict[tuple[int, int], CgroupDirs | None] = {}
        self._psi = list(PSI_RESOURCES)  # those this kernel has
        self._stat = True  # /proc/stat readable
        self._seen: dict[str, _Seen] = {}

    # ---- one GPU ----
    def read(self, gpu: str, pids: Iterable[int], now: float, out: dict[str, float]) -> None:
        """Add ``gpu``'s host evidence for its processes ``pids`` at tick ``now`` to ``out``."""
        if now != self._tick:
            self._start_tick(now)
        prev = self._seen.get(gpu)
        key = (prev.tick if prev is not None else -1, frozenset(pids))
        done = self._done.get(key)
        if done is None:  # GPUs with the same processes and the same previous tick have the same rows
            done = self._done[key] = self._compute(prev, key[1])
        self._seen[gpu] = done[0]
        out.update(done[1])

    def _compute(self, prev: _Seen | None, pids: frozenset[int]) -> tuple[_Seen, dict[str, float]]:
        t = self._t
        out: dict[str, float] = {}
        seen = _Seen(self._serial, t)
        dt = t - prev.t if prev is not None else 0.0
        if self.processes:
            procs = {pid: r for pid in pids if (r := self._process(pid)) is not None}
            seen.procs = procs
            cgroups: dict[str, CgroupReading] = {}
            for pid, r in procs.items():
                d = self._dirs_of(pid, r)
                if d is not None and d.key not in cgroups and (c := self._cgroup(d)) is not None:
                    cgroups[d.key] = c
            seen.cgroups = cgroups
            if procs:
                out[k.PROCESS_BLOCKED_THREADS] = sum(r.blocked for r in procs.values())
            limits = [c.limit_cores for c in cgroups.values()]
            if limits and all(x is not None for x in limits):
                out[k.CONTAINER_CPU_LIMIT_CORES] = sum(x for x in limits if x is not None)
            if prev is not None and dt > 0:
                self._process_rates(prev.procs, procs, dt, out)
                self._cgroup_rates(prev.cgroups, cgroups, dt, out)
        seen.node = self._node_reading()
        if prev is not None and dt > 0 and prev.node is not None:
            self._node_rates(prev.node, seen.node, dt, out)
        return seen, out

    def forget(self, gpu: str) -> None:
        """Drop a GPU's base (it was lost): its next sample starts afresh."""
        self._seen.pop(gpu, None)

    def close(self) -> None:
        """Close the files kept open (the agent stops)."""
        self.files.close()

    # ---- rates ----
    @staticmethod
    def _process_rates(before: dict[int, ProcessReading], now: dict[int, ProcessReading], dt: float,
                       out: dict[str, float]) -> None:
        """A thread read on both samples gives its rates over ``dt``; one read now only (a full
        pass after the GPU's previous sample) or not now (between passes) its last pass's."""
        cpu = wait = 0.0
        known = threads = 0
        best_run = best_wait = -1.0
        scale = 1e-9 / dt
        for pid, cur in now.items():
            old = before.get(pid)
            if old is None or old.start != cur.start:
                continue  # new since the GPU's previous sample (or a reused pid): no base yet
            known += 1
            cpu += max(0.0, cur.cpu_s - old.cpu_s)
            bases = old.threads
            for tid, (run, waited) in cur.threads.items():
                base = bases.get(tid)
                if base is not None:
                    r, w = max(0, run - base[0]) * scale, max(0, waited - base[1]) * scale
                elif (rate := cur.rates.get(tid)) is not None:
                    r, w = rate
                else:
                    continue
                threads += 1
                wait += w
                if r > best_run:
                    best_run, best_wait = r, w
            rest = cur.rest
            if rest is not None:
                threads += 1
                wait += rest.wait
                if rest.best_run > best_run:
                    best_run, best_wait = rest.best_run, rest.best_wait
        if not known:
            return
        out[k.PROCESS_CPU_CORES] = cpu / dt
        if threads:
            out[k.PROCESS_RUNQUEUE_WAIT_CORES] = wait
            out[k.PROCESS_BUSIEST_THREAD_RATIO] = _clamp(best_run)
            out[k.PROCESS_SLEEPING_RATIO] = _clamp(1.0 - best_run - best_wait)

    @staticmethod
    def _cgroup_rates(before: dict[str, CgroupReading], now: dict[str, CgroupReading], dt: float,
                      out: dict[str, float]) -> None:
        usage: float | None = None
        periods = throttled = 0
        for key, cur in now.items():
            old = before.get(key)
            if old is None:
                continue
            if cur.usage_s is not None and old.usage_s is not None:
                usage = (usage or 0.0) + max(0.0, cur.usage_s - old.usage_s)
            if None not in (cur.periods, cur.throttled, old.periods, old.throttled):
                periods += max(0, (cur.periods or 0) - (old.periods or 0))
                throttled += max(0, (cur.throttled or 0) - (old.throttled or 0))
        if usage is not None:
            out[k.CONTAINER_CPU_USAGE_CORES] = usage / dt
        if periods > 0:
            out[k.CONTAINER_CPU_THROTTLED_RATIO] = _clamp(throttled / periods)

    @staticmethod
    def _node_rates(before: _Node, now: _Node, dt: float, out: dict[str, float]) -> None:
        if before.cpu is not None and now.cpu is not None and now.cpu.total > before.cpu.total:
            idle = now.cpu.idle - before.cpu.idle
            out[k.NODE_CPU_BUSY_RATIO] = _clamp(1.0 - idle / (now.cpu.total - before.cpu.total))
        for resource, total in now.psi.items():
            old = before.psi.get(resource)
            if old is not None:
                out[_PSI_KEYS[resource]] = _clamp((total - old) / dt)

    # ---- readings, once per tick ----
    def _start_tick(self, now: float) -> None:
        self._tick, self._now, self._t = now, now, self.clock()
        self._serial += 1
        self.files.sweep()
        self._procs.clear()
        self._cgroups.clear()
        self._done.clear()
        self._node = None
        if not 0.0 <= now - self._pruned < self.threads.full_every_s:
            self._pruned = now
            self.threads.prune(now)

    def _process(self, pid: int) -> ProcessReading | None:
        if pid in self._procs:
            return self._procs[pid]
        try:
            reading: ProcessReading | None = self.threads.read(self.files.read, self.proc_root, pid, self._now, self._t)
        except (OSError, ValueError) as exc:
            self._failed("process", f"{self.proc_root}/{pid}", exc)
            reading = None
        self._procs[pid] = reading
        return reading

    def _dirs_of(self, pid: int, reading: ProcessReading) -> CgroupDirs | None:
        key = (pid, reading.start)
        if key in self._dirs:
            return self._dirs[key]
        if len(self._dirs) >= _CGROUP_CACHE_MAX:
            self._dirs.clear()  # processes come and go: keep it bounded
        path = f"{self.proc_root}/{pid}/cgroup"
        try:
            dirs = locate(self.files.read(path).decode("utf-8", "replace"), self.cgroup_root)
        except OSError as exc:
            self._failed("cgroup", path, exc)
            return None  # not remembered: tried again next tick
        if dirs is None:
            self._failed("cgroup", path, OSError("no cpu cgroup under the cgroup root"))
        self._dirs[key] = dirs
        return dirs

    def _cgroup(self, dirs: CgroupDirs) -> CgroupReading | None:
        if dirs.key in self._cgroups:
            return self._cgroups[dirs.key]
        known = self._limits.get(dirs.key)
        try:
            if known is not None and 0.0 <= self._now - known[0] < self.threads.full_every_s:
                reading: CgroupReading | None = read_cgroup(self.files.read, dirs, (known[1],))
            else:  # the limit is re-read as often as a full pass of threads (it changes on a resize only)
                reading = read_cgroup(self.files.read, dirs)
                if len(self._limits) >= _CGROUP_CACHE_MAX:
                    self._limits.clear()
                self._limits[dirs.key] = (self._now, reading.limit_cores)
        except (OSError, ValueError) as exc:
            self._failed("cgroup", dirs.cpu or dirs.cpuacct or "?", exc)
            reading = None
        self._cgroups[dirs.key] = reading
        return reading

    def _node_reading(self) -> _Node:
        if self._node is not None:
            return self._node
        cpu: CpuTimes | None = None
        if self._stat:
            try:
                cpu = read_cpu_times(self.files.read, self.proc_root)
            except (OSError, ValueError) as exc:
                self._failed("stat", f"{self.proc_root}/stat", exc)
                if isinstance(exc, FileNotFoundError):
                    self._stat = False
        psi: dict[str, float] = {}
        for resource in list(self._psi):
            try:
                psi[resource] = read_pressure(self.files.read, self.proc_root, resource)
            except (OSError, ValueError) as exc:
                self._failed("psi", f"{self.proc_root}/pressure/{resource}", exc)
                if isinstance(exc, OSError) and exc.errno in _NO_PSI:
                    self._psi.remove(resource)  # this kernel has none (or PSI is off): stop asking
        self._node = _Node(cpu, psi)
        return self._node

    def _failed(self, what: str, path: str, exc: Exception) -> None:
        kind = f"host_{what}:{type(exc).__name__}"
        self.errors[kind] += 1
        exited = what == "process" and isinstance(exc, (FileNotFoundError, ProcessLookupError))
        level = logging.INFO if exited else logging.WARNING
        self._log.log(level, kind, "host evidence: cannot read %s (%s); its values are absent", path,
                      exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
