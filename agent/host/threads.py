"""Which threads of a process are read on a tick: all of them every few seconds, the busiest in between.

Why: the thread-level rows (busiest thread, runqueue wait, sleeping, blocked threads) need
each thread's ``stat`` and ``schedstat`` (:mod:`agent.host.proc`), two reads per thread per
tick, and a training process has tens of threads (data loaders, NCCL, CUDA's own) of which
one or two feed the GPU. So a *full pass* (list the threads, read them all) runs every
``full_every_s`` of the scheduler's time (5 s), and on the next tick after a pass that found
a thread not seen before (a new thread gets its rate at once; a process starting up is read
fully until its threads settle) or lost a tracked one. In between, only the ``track``
busiest threads of the last pass (by run + wait time per second over the pass's interval)
are read, every tick. The process's own ``stat`` (CPU time of all threads, start time) is
read on every tick.

What a tick's :class:`ProcessReading` then holds: the threads read on it (all, or the
tracked ones) with their cumulative figures; every thread's run and wait time per second
over the last full pass's interval (``rates``); between passes, the same figures summed
for the threads not read (``rest``); and the D-state count of the threads read now plus,
between passes, that of the others at the last pass. A thread that becomes the busiest
between passes therefore shows in ``rest`` from the next pass on (at most ``full_every_s``
late) and is read every tick after it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from agent.host.files import Read
from agent.host.proc import list_threads, read_process_stat, read_thread

FULL_EVERY_S = 5.0
TRACK = 2


@dataclass(frozen=True, slots=True)
class Rest:
    """The threads not read on a tick, as of the last full pass (rates per second of wall time)."""

    wait: float  # their summed runqueue wait, s/s
    best_run: float  # the busiest of them: its run time, s/s
    best_wait: float  # and its wait, s/s
    blocked: int  # how many were in state D at the pass


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process at one tick: cumulative figures of what was read, and the last pass's rates."""

    start: int  # start time in clock ticks since boot (field 22): a reused pid has another
    cpu_s: float  # user + system time of all threads, those that exited included
    threads: dict[int, tuple[int, int]]  # the threads read now: tid -> (ns on a CPU, ns waiting for one)
    blocked: int  # threads in state D: those read now, and (between passes) the others at the last pass
    rates: dict[int, tuple[float, float]]  # tid -> (run s/s, wait s/s) over the last full pass's interval
    rest: Rest | None  # between passes: the threads not read now; None on a full pass


_NO_RATES: dict[int, tuple[float, float]] = {}


@dataclass(slots=True)
class _Book:
    """What the last full pass of one process left: when, every thread's figures, who to track."""

    start: int
    at: float  # scheduler time of the pass
    t: float  # wall time of its reads
    figures: dict[int, tuple[int, int]]
    states: dict[int, bool]  # tid -> in state D at the pass
    rates: dict[int, tuple[float, float]]
    tracked: tuple[int, ...]
    rest: Rest | None
    again: bool  # a full pass on the next tick


class Threads:
    """Per-process books of the last full pass; :meth:`read` makes one tick's reading."""

    def __init__(self, full_every_s: float = FULL_EVERY_S, track: int = TRACK) -> None:
        self.full_every_s = full_every_s
        self.track = track
        self.full_passes = 0  # how many full passes were made (for tests and the benchmark)
        self._books: dict[int, _Book] = {}

    def read(self, read: Read, proc_root: str, pid: int, now: float, t: float) -> ProcessReading:
        """Read process ``pid`` at tick ``now`` (wall time ``t``); ``OSError`` if its stat fails."""
        base = f"{proc_root}/{pid}"
        start, cpu_s = read_process_stat(read, base)
        book = self._books.get(pid)
        if book is None or book.start != start or book.again or not 0.0 <= now - book.at < self.full_every_s:
            return self._full(read, base, pid, start, cpu_s, book if book is not None and book.start == start
                              else None, now, t)
        task = f"{base}/task"
        threads: dict[int, tuple[int, int]] = {}
        blocked = book.rest.blocked if book.rest is not None else 0
        for tid in book.tracked:
            try:
                run, wait, d = read_thread(read, task, tid)
            except (OSError, ValueError):
                book.again = True  # a tracked thread ended: list them again next tick
                continue
            threads[tid] = (run, wait)
            blocked += d
        return ProcessReading(start, cpu_s, threads, blocked, book.rates, book.rest)

    def prune(self, now: float) -> None:
        """Drop the books of processes not read for two passes' time (they ended or left their GPU)."""
        keep = 2 * self.full_every_s
        for pid in [p for p, b in self._books.items() if not 0.0 <= now - b.at < keep]:
            del self._books[pid]

    def __len__(self) -> int:
        return len(self._books)

    def _full(self, read: Read, base: str, pid: int, start: int, cpu_s: float, book: _Book | None, now: float,
              t: float) -> ProcessReading:
        self.full_passes += 1
        task = f"{base}/task"
        figures: dict[int, tuple[int, int]] = {}
        states: dict[int, bool] = {}
        for tid in list_threads(base):
            try:
                run, wait, d = read_thread(read, task, tid)
            except (OSError, ValueError):
                continue  # the thread ended meanwhile (or a kernel without schedstats): the rest still count
            figures[tid] = (run, wait)
            states[tid] = d
        rates: dict[int, tuple[float, float]] = _NO_RATES
        new = True
        if book is not None and t > book.t:
            scale = 1e-9 / (t - book.t)
            old = book.figures
            rates = {tid: (max(0, fig[0] - was[0]) * scale, max(0, fig[1] - was[1]) * scale)
                     for tid, fig in figures.items() if (was := old.get(tid)) is not None}
            new = len(rates) < len(figures) or any(tid not in figures for tid in book.tracked)
        tracked = tuple(heapq.nlargest(self.track, rates, key=lambda tid: rates[tid][0] + rates[tid][1]))
        self._books[pid] = _Book(start, now, t, figures, states, rates, tracked,
                                 _rest(rates, states, tracked), again=new)
        return ProcessReading(start, cpu_s, figures, sum(states.values()), rates, None)


def _rest(rates: dict[int, tuple[float, float]], states: dict[int, bool], tracked: tuple[int, ...]) -> Rest | None:
    others = [tid for tid in states if tid not in tracked]
    if not others:
        return None
    wait = best_run = best_wait = 0.0
    for tid in others:
        rate = rates.get(tid)
        if rate is None:
            continue
        wait += rate[1]
        if rate[0] > best_run:
            best_run, best_wait = rate
    return Rest(wait, best_run, best_wait, sum(states[tid] for tid in others))
