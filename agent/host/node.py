"""The node's CPU evidence: /proc/stat's CPU times and the pressure-stall information (PSI).

Why: a GPU whose feeding process gets less CPU may be starved by its neighbours on the node
rather than by its own limit. /proc/stat's first line gives the node's CPU time by kind
(``cpu user nice system idle iowait irq softirq steal guest guest_nice``, clock ticks;
guest time is already inside user and nice); busy = 1 - (idle + iowait) / total over an
interval. PSI (``/proc/pressure/cpu|memory|io``, Linux 4.20+ with ``CONFIG_PSI``) gives
the microseconds during which some task waited for that resource (``some ... total=N``);
its change per second of wall time is the share of time something waited. A kernel
without PSI has no /proc/pressure: those values are absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.host.files import Read

PSI_RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The node's cumulative CPU time (clock ticks): idle (with iowait) and total."""

    idle: int
    total: int


def read_cpu_times(read: Read, proc_root: str) -> CpuTimes:
    """/proc/stat's aggregate ``cpu`` line; ``OSError`` if unreadable or malformed."""
    first = read(f"{proc_root}/stat").split(b"\n", 1)[0].split()
    if not first or first[0] != b"cpu" or len(first) < 5:
        raise OSError(f"{proc_root}/stat does not start with the cpu line")
    ticks = [int(v) for v in first[1:9]]  # user .. steal; guest is counted in user/nice
    return CpuTimes(ticks[3] + (ticks[4] if len(ticks) > 4 else 0), sum(ticks))


def read_pressure(read: Read, proc_root: str, resource: str) -> float:
    """Seconds some task has waited for ``resource`` since boot (PSI ``some total=``, µs)."""
    text = read(f"{proc_root}/pressure/{resource}")
    at = text.find(b"total=") if text.startswith(b"some ") else -1  # the first line is "some"'s
    end = text.find(b"\n", at)
    try:
        return int(text[at + 6:end if end >= 0 else None]) / 1e6 if at >= 0 else _no_some(proc_root, resource)
    except ValueError:
        raise OSError(f"{proc_root}/pressure/{resource} has a malformed 'some ... total=' line") from None


def _no_some(proc_root: str, resource: str) -> float:
    raise OSError(f"{proc_root}/pressure/{resource} has no 'some ... total=' line")
