"""A process's container CPU evidence from cgroupfs: usage, the CFS limit, throttled periods.

Why both versions: Kubernetes nodes run cgroup v2 (``cpu.stat`` with ``usage_usec``,
``nr_periods``, ``nr_throttled``, ``throttled_usec``; the limit in ``cpu.max`` as ``<quota>
<period>`` or ``max <period>``) or v1 (``cpuacct.usage`` in nanoseconds in the cpuacct
hierarchy; ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, ``-1`` for none, and ``cpu.stat``
with ``nr_periods``/``nr_throttled`` in the cpu hierarchy). A hybrid host mounts both; the
v1 cpu controller then holds the limit, so a v1 line naming ``cpu`` or ``cpuacct`` wins.

Where the process's cgroup is comes from its /proc/<pid>/cgroup, parsed by the
attribution code's :func:`agent.attribution.cgroup.cgroup_lines` (the same file it reads
for the pod); the directories are under ``cgroup_root`` (``/sys/fs/cgroup``, or where the
host's is mounted). A path that would leave the root (a process outside the reader's
cgroup namespace shows ``/..``) is refused. Each figure is None where its file is missing;
a malformed one raises ``ValueError``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agent.attribution.cgroup import cgroup_lines
from agent.host.files import Read


@dataclass(frozen=True, slots=True)
class CgroupDirs:
    """Where one process's CPU figures are: the cpu and cpuacct directories (one for v2)."""

    version: int
    cpu: str | None  # v2: the cgroup; v1: its cpu hierarchy directory
    cpuacct: str | None  # v1 only: its cpuacct hierarchy directory

    @property
    def key(self) -> str:
        """Identifies the cgroup (two processes of one container share it)."""
        return f"{self.cpu}|{self.cpuacct}"


@dataclass(frozen=True, slots=True)
class CgroupReading:
    """Cumulative CPU figures of one cgroup at one moment (None: not readable there)."""

    usage_s: float | None
    limit_cores: float | None  # None also when unlimited
    periods: int | None
    throttled: int | None


def _under(root: str, path: str) -> str | None:
    joined = os.path.normpath(f"{root}/{path.lstrip('/')}")
    return joined if joined == root or joined.startswith(root.rstrip("/") + "/") else None


def locate(cgroup_text: str, cgroup_root: str) -> CgroupDirs | None:
    """The CPU directories of the process whose /proc/<pid>/cgroup is ``cgroup_text``; None if none."""
    root = os.path.normpath(cgroup_root)
    cpu = cpuacct = unified = None
    for line in cgroup_lines(cgroup_text):
        controllers = line.controllers.split(",")
        if line.hierarchy == "0" and not line.controllers:
            unified = line.path
        elif "cpu" in controllers or "cpuacct" in controllers:
            where = _under(f"{root}/{line.controllers}", line.path)
            if "cpu" in controllers:
                cpu = where
            if "cpuacct" in controllers:
                cpuacct = where
    if cpu is not None or cpuacct is not None:
        return CgroupDirs(1, cpu, cpuacct)
    if unified is None:
        return None
    # a v2-only host mounts the unified tree at the root; a hybrid one under "unified"
    base = root if os.path.exists(f"{root}/cgroup.controllers") else f"{root}/unified"
    where = _under(base, unified)
    return CgroupDirs(2, where, None) if where is not None else None


def _stat(text: bytes) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def _maybe(read: Read, path: str) -> bytes | None:
    try:
        return read(path)
    except FileNotFoundError:
        return None


def read_cgroup(read: Read, dirs: CgroupDirs, known_limit: tuple[float | None] | None = None) -> CgroupReading:
    """Read one cgroup's CPU figures; an ``OSError`` other than a missing file propagates.
    ``known_limit``, when given, holds the limit read before (the reader re-reads it every few
    seconds: it changes on a resize only), and its files are not read."""
    if dirs.version == 2:
        assert dirs.cpu is not None
        stat = _stat(_maybe(read, f"{dirs.cpu}/cpu.stat") or b"")
        usage_us = stat.get(b"usage_usec")
        return CgroupReading(None if usage_us is None else usage_us / 1e6,
                             _v2_limit(read, dirs.cpu) if known_limit is None else known_limit[0],
                             stat.get(b"nr_periods"), stat.get(b"nr_throttled"))
    usage: float | None = None
    if dirs.cpuacct is not None:
        raw = _maybe(read, f"{dirs.cpuacct}/cpuacct.usage")
        usage = int(raw) / 1e9 if raw is not None else None
    if dirs.cpu is None:
        return CgroupReading(usage, None, None, None)
    stat = _stat(_maybe(read, f"{dirs.cpu}/cpu.stat") or b"")
    return CgroupReading(usage, _v1_limit(read, dirs.cpu) if known_limit is None else known_limit[0],
                         stat.get(b"nr_periods"), stat.get(b"nr_throttled"))


def _v2_limit(read: Read, cpu: str) -> float | None:
    """``cpu.max``: ``<quota> <period>`` in µs, or ``max <period>`` (none); the root has no file."""
    text = _maybe(read, f"{cpu}/cpu.max")
    if text is None:
        return None
    quota, _, period = text.strip().partition(b" ")
    return int(quota) / int(period) if quota != b"max" and int(period) > 0 else None


def _v1_limit(read: Read, cpu: str) -> float | None:
    """``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; a quota of -1 is none."""
    quota, period = _maybe(read, f"{cpu}/cpu.cfs_quota_us"), _maybe(read, f"{cpu}/cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    q, p = int(quota), int(period)
    return q / p if q > 0 and p > 0 else None
