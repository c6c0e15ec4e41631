"""One process's CPU evidence from /proc: its CPU time, a thread's run and wait time, D states.

Why these files: ``/proc/<pid>/stat`` has the process's user and system time summed over
all its threads, those that exited included (fields 14-15, clock ticks), and its start time
(field 22, which tells a reused pid from the process seen before).
``/proc/<pid>/task/<tid>/schedstat`` has, per thread, the nanoseconds it ran on a CPU and
the nanoseconds it was runnable but waited in a runqueue (CPU starvation, which no CPU-time
counter shows); the thread's ``stat`` has its state (``D``: uninterruptible, usually I/O).
``/proc/<pid>/schedstat`` is no process total: Linux shows the main thread's figures there,
so the wait of the other threads needs their own files. Which threads are read on a tick is
:mod:`agent.host.threads`'s choice; the figures are cumulative, and
:mod:`agent.host.reader` turns two readings into rates.

Parsing is on bytes with the fewest operations (these run for every thread read): the state
is the byte after ``pid (comm) ``, found from the last ``)`` (comm may hold spaces and ``)``).
"""

from __future__ import annotations

import os

from agent.host.files import Read

#: clock ticks per second of /proc/<pid>/stat's times (USER_HZ, 100 on Linux)
TICKS_PER_S = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
_D = ord("D")


def read_process_stat(read: Read, base: str) -> tuple[int, float]:
    """``(start time in clock ticks, user+system seconds of all threads)`` of the process at
    ``base`` (``/proc/<pid>``); ``OSError`` if unreadable or not a stat line."""
    stat = read(f"{base}/stat")
    fields = stat[stat.rfind(b")") + 2:].split(b" ", 20)  # state .. starttime (fields 3-22)
    try:
        return int(fields[19]), (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    except (IndexError, ValueError):
        raise OSError(f"{base}/stat is not a process stat line") from None


def read_thread(read: Read, task: str, tid: int) -> tuple[int, int, bool]:
    """``(ns on a CPU, ns waiting for one, in state D now)`` of thread ``tid`` under ``task``
    (``/proc/<pid>/task``); ``OSError`` (it ended) or ``ValueError`` (no schedstats) if not."""
    stat = read(f"{task}/{tid}/stat")
    run_ns, wait_ns, _ = read(f"{task}/{tid}/schedstat").split(b" ", 2)
    end = stat.rfind(b")") + 2
    return int(run_ns), int(wait_ns), end < len(stat) and stat[end] == _D


def list_threads(base: str) -> list[int]:
    """The thread ids of the process at ``base`` now; ``OSError`` if it is gone."""
    return [int(name) for name in os.listdir(f"{base}/task")]
