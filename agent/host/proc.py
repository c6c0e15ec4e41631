"""One process's CPU evidence from /proc: its CPU time, each thread's run and wait time, D states.

Why these files: ``/proc/<pid>/stat`` has the process's user and system time summed over
all its threads, those that exited included (fields 14-15, clock ticks), its state and its
start time (field 22, which tells a reused pid from the process seen before).
``/proc/<pid>/task/<tid>/schedstat`` has, per thread, the nanoseconds it ran on a CPU and
the nanoseconds it was runnable but waited in a runqueue (CPU starvation, which no CPU-time
counter shows); the thread's ``stat`` has its state (``D``: uninterruptible, usually I/O).
The figures are cumulative; :mod:`agent.host.reader` turns two readings into rates.

A thread that ends between the directory listing and its files is skipped; the process's
own ``stat`` failing (it exited, no permission) raises ``OSError`` to the caller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agent.host.files import Read

#: clock ticks per second of /proc/<pid>/stat's times (USER_HZ, 100 on Linux)
TICKS_PER_S = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """Cumulative CPU figures of one process at one moment."""

    start: int  # start time in clock ticks since boot (field 22): a reused pid has another
    cpu_s: float  # user + system time of all threads, those that exited included
    threads: dict[int, tuple[int, int]]  # tid -> (ns on a CPU, ns waiting for one) from schedstat
    blocked: int  # threads in state D now


def _after_comm(stat: bytes) -> list[bytes]:
    """The fields after ``pid (comm)``: comm is parenthesised and may hold spaces and ')'."""
    return stat.rpartition(b")")[2].split()


def read_process(read: Read, proc_root: str, pid: int) -> ProcessReading:
    """Read one process (``proc_root`` is ``/proc`` or where the host's is mounted)."""
    base = f"{proc_root}/{pid}"
    fields = _after_comm(read(f"{base}/stat"))
    try:
        cpu_ticks = int(fields[11]) + int(fields[12])
        start = int(fields[19])
    except (IndexError, ValueError):
        raise OSError(f"{base}/stat is not a process stat line") from None
    threads: dict[int, tuple[int, int]] = {}
    blocked = 0
    task = f"{base}/task"
    for name in os.listdir(task):
        try:
            blocked += _after_comm(read(f"{task}/{name}/stat"))[:1] == [b"D"]
            run_ns, wait_ns = read(f"{task}/{name}/schedstat").split()[:2]
            threads[int(name)] = (int(run_ns), int(wait_ns))
        except (OSError, ValueError):
            continue  # the thread ended meanwhile (or a kernel without schedstats): the rest still count
    return ProcessReading(start, cpu_ticks / TICKS_PER_S, threads, blocked)
