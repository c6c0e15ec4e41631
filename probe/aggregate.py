"""One window's CUPTI records, folded into a :class:`telemetry.kernels.KernelWindow`.

Why a pure module: the CUPTI side (:mod:`probe.cupti_source`) only copies the few fields it
needs out of each activity record, as plain tuples, and this folds them. So the arithmetic
(p95 per kernel, busy time as the union of kernel intervals, idle gaps between them, copies
by direction and host memory) is tested without a GPU, and the same code runs on the H200.

Kernels are keyed by their mangled name (cheap) and demangled once per name at the end. The
heaviest :data:`telemetry.kernels.MAX_KERNELS` - 1 are kept; the rest are summed into one
``(other kernels)`` entry, so a window always fits in one datagram.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from telemetry.kernels import (
    MAX_KERNELS,
    OTHER_KERNELS,
    SHORT_KERNEL_NS,
    CopyStat,
    KernelStat,
    KernelWindow,
    occupancy,
)

#: (device, mangled name, start ns, end ns, grid xyz, block xyz, registers per thread, shared bytes per block)
Kernel = tuple[int, str, int, int, tuple[int, int, int], tuple[int, int, int], int, int]
#: CUPTI's memcpy kinds (CUpti_ActivityMemcpyKind) and memory kinds (CUpti_ActivityMemoryKind), by value
COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KIND = {1: "pageable", 2: "pinned", 3: "device", 4: "device", 5: "managed", 6: "device", 7: "managed"}
HOST_SIDE = {"HtoD": 0, "DtoH": 1, "HtoH": 0}  # which end of the copy is host memory (0 source, 1 destination)


@dataclass(slots=True)
class _KernelAcc:
    durations: list[int] = field(default_factory=list)
    total: int = 0
    calls: int = 0
    short: int = 0
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers: int = 0
    shared: int = 0
    device: int = 0


@dataclass(slots=True)
class WindowAggregator:
    """Accumulates one window's records (from CUPTI's buffer callback) and folds them at the end."""

    keep_durations: int = 200_000  # past this many kernel records, p95 comes from the first ones only
    kernels: dict[str, _KernelAcc] = field(default_factory=dict)
    intervals: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    copies: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    memset: list[int] = field(default_factory=lambda: [0, 0])
    sync: list[int] = field(default_factory=lambda: [0, 0])
    launch: list[int] = field(default_factory=lambda: [0, 0])
    records: int = 0
    dropped: int = 0
    _kept: int = 0

    def kernel(self, device: int, name: str, start: int, end: int, grid: tuple[int, int, int],
               block: tuple[int, int, int], registers: int, shared: int) -> None:
        self.records += 1
        duration = max(0, end - start)
        acc = self.kernels.get(name)
        if acc is None:
            acc = self.kernels[name] = _KernelAcc(grid=grid, block=block, registers=registers, shared=shared,
                                                  device=device)
        acc.calls += 1
        acc.total += duration
        if duration < SHORT_KERNEL_NS:
            acc.short += 1
        if self._kept < self.keep_durations:
            acc.durations.append(duration)
            self._kept += 1
            self.intervals.setdefault(device, []).append((start, end))

    def memcpy(self, copy_kind: int, src_kind: int, dst_kind: int, nbytes: int, start: int, end: int) -> None:
        self.records += 1
        kind = COPY_KIND.get(copy_kind, "other")
        side = HOST_SIDE.get(kind)
        memory = "device" if side is None else MEMORY_KIND.get(dst_kind if side else src_kind, "other")
        acc = self.copies.setdefault((kind, memory), [0, 0, 0])
        acc[0] += 1
        acc[1] += max(0, nbytes)
        acc[2] += max(0, end - start)

    def memset_record(self, start: int, end: int) -> None:
        self.records += 1
        self.memset[0] += 1
        self.memset[1] += max(0, end - start)

    def sync_record(self, start: int, end: int) -> None:
        self.records += 1
        self.sync[0] += 1
        self.sync[1] += max(0, end - start)

    def launch_record(self, start: int, end: int) -> None:
        self.records += 1
        self.launch[0] += 1
        self.launch[1] += max(0, end - start)

    def finish(self, ts: float, duration_s: float, period_s: float, pid: int, command: str,
               demangle: Callable[[str], str], capability: Callable[[int], tuple[int, int] | None],
               probe: str = "", dropped_records: int = 0) -> KernelWindow:
        """The window, with kernels merged by demangled name (templates of one name can differ
        only in their mangling), heaviest first."""
        merged: dict[str, KernelStat] = {}
        p95s: dict[str, list[int]] = {}
        for mangled, acc in self.kernels.items():
            name = demangle(mangled) or mangled
            cc = capability(acc.device)
            threads = acc.block[0] * acc.block[1] * acc.block[2]
            occ = occupancy(cc, threads, acc.registers, acc.shared) if cc else None
            old = merged.get(name)
            if old is None:
                merged[name] = KernelStat(name, acc.calls, acc.total, 0, acc.grid, acc.block, acc.registers,
                                          acc.shared, occ, acc.short)
                p95s[name] = list(acc.durations)
            else:
                merged[name] = KernelStat(name, old.calls + acc.calls, old.total_ns + acc.total, 0, old.grid,
                                          old.block, old.registers, old.shared_bytes, old.occupancy,
                                          old.short_calls + acc.short)
                p95s[name].extend(acc.durations)
        stats = sorted((_with_p95(k, p95s[k.name]) for k in merged.values()), key=lambda k: -k.total_ns)
        if len(stats) > MAX_KERNELS:
            rest = stats[MAX_KERNELS - 1:]
            stats = [*stats[:MAX_KERNELS - 1],
                     KernelStat(OTHER_KERNELS, sum(k.calls for k in rest), sum(k.total_ns for k in rest),
                                max(k.p95_ns for k in rest), short_calls=sum(k.short_calls for k in rest))]
        busy = idle = gaps = 0
        for spans in self.intervals.values():
            b, i, g = _busy_idle(spans)
            busy, idle, gaps = busy + b, idle + i, gaps + g
        copies = tuple(CopyStat(kind, memory, c[0], c[1], c[2]) for (kind, memory), c in sorted(self.copies.items()))
        return KernelWindow(ts=ts, duration_s=duration_s, period_s=period_s, pid=pid, command=command,
                            kernels=tuple(stats), copies=copies, memset_calls=self.memset[0],
                            memset_ns=self.memset[1], sync_calls=self.sync[0], sync_ns=self.sync[1],
                            launch_calls=self.launch[0], launch_ns=self.launch[1], busy_ns=busy, idle_ns=idle,
                            idle_gaps=gaps, records=self.records, dropped_records=self.dropped + dropped_records,
                            probe=probe)


def _with_p95(stat: KernelStat, durations: list[int]) -> KernelStat:
    if not durations:
        return stat
    durations.sort()
    p95 = durations[min(len(durations) - 1, int(0.95 * len(durations)))]
    return KernelStat(stat.name, stat.calls, stat.total_ns, p95, stat.grid, stat.block, stat.registers,
                      stat.shared_bytes, stat.occupancy, stat.short_calls)


def _busy_idle(spans: list[tuple[int, int]]) -> tuple[int, int, int]:
    """Busy time (the union of kernel intervals on one device), the idle time between its first
    start and last end, and how many gaps of at least SHORT_KERNEL_NS that idle time has."""
    if not spans:
        return 0, 0, 0
    spans.sort()
    busy = idle = gaps = 0
    cur_start, cur_end = spans[0]
    for start, end in spans[1:]:
        if start <= cur_end:
            cur_end = max(cur_end, end)
            continue
        busy += cur_end - cur_start
        gap = start - cur_end
        idle += gap
        gaps += gap >= SHORT_KERNEL_NS
        cur_start, cur_end = start, end
    busy += cur_end - cur_start
    return busy, idle, gaps
