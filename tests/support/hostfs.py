"""Fake /proc and cgroup trees for the host-evidence reader, written as the kernel formats them.

Each writer overwrites the files with the cumulative counters given, so a test writes a
tree, reads, advances the counters, and reads again. Shared by ``tests/test_host_reader.py``
and ``tests/test_catalog.py``.
"""

from __future__ import annotations

from pathlib import Path


def write_process(proc: Path, pid: int, *, utime: int, stime: int, threads: dict[int, tuple[str, int, int]],
                  start: int = 5000, cgroup: str = "0::/kubepods.slice/pod-a.slice/cri-containerd-a.scope\n",
                  comm: str = "py (thon)") -> None:
    """/proc/<pid>/{stat,cgroup} and task/<tid>/{stat,schedstat}; ``threads``: tid -> (state, run ns, wait ns)."""
    base = proc / str(pid)
    (base / "task").mkdir(parents=True, exist_ok=True)
    (base / "stat").write_text(_stat(pid, comm, "S", utime, stime, start))
    (base / "cgroup").write_text(cgroup)
    for tid, (state, run, wait) in threads.items():
        t = base / "task" / str(tid)
        t.mkdir(exist_ok=True)
        (t / "stat").write_text(_stat(tid, comm, state, 0, 0, start))
        (t / "schedstat").write_text(f"{run} {wait} 42\n")


def _stat(pid: int, comm: str, state: str, utime: int, stime: int, start: int) -> str:
    # fields 3.. after "pid (comm)": state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
    # majflt, cmajflt, utime (14), stime (15), cutime, cstime, priority, nice, threads, itrealvalue, starttime (22)
    rest = [state, "1", str(pid), str(pid), "0", "-1", "4194560", "100", "0", "0", "0", str(utime), str(stime),
            "0", "0", "20", "0", "1", "0", str(start)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def write_node(proc: Path, *, idle: int, busy: int, psi_us: dict[str, int] | None) -> None:
    """/proc/stat (idle+iowait and busy ticks) and, unless ``psi_us`` is None, /proc/pressure/*."""
    proc.mkdir(parents=True, exist_ok=True)
    user, iowait = busy, idle // 4
    (proc / "stat").write_text(
        f"cpu  {user} 0 0 {idle - iowait} {iowait} 0 0 0 0 0\ncpu0 {user} 0 0 {idle - iowait} {iowait} 0 0 0 0 0\n"
        "intr 1 2 3\nctxt 99\n")
    if psi_us is not None:
        (proc / "pressure").mkdir(exist_ok=True)
        for resource, total in psi_us.items():
            full = "" if resource == "cpu" else f"full avg10=0.00 avg60=0.00 avg300=0.00 total={total // 2}\n"
            (proc / "pressure" / resource).write_text(
                f"some avg10=1.00 avg60=0.50 avg300=0.10 total={total}\n{full}")


def write_cgroup_v2(root: Path, path: str, *, usage_us: int, periods: int, throttled: int,
                    cpu_max: str | None = "200000 100000") -> None:
    """A v2 cgroup: cpu.stat, and cpu.max unless None (the controller not enabled there)."""
    d = root / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (d / "cpu.stat").write_text(
        f"usage_usec {usage_us}\nuser_usec {usage_us // 2}\nsystem_usec {usage_us // 2}\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {throttled * 1000}\n")
    if cpu_max is not None:
        (d / "cpu.max").write_text(cpu_max + "\n")


def write_cgroup_v1(root: Path, path: str, *, usage_ns: int, periods: int, throttled: int, quota_us: int = 150000,
                    period_us: int = 100000, controllers: str = "cpu,cpuacct") -> None:
    """A v1 cgroup under ``root/<controllers>``: cpuacct.usage, cpu.cfs_quota_us/period_us, cpu.stat."""
    d = root / controllers / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpuacct.usage").write_text(f"{usage_ns}\n")
    (d / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    (d / "cpu.stat").write_text(f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled * 10**6}\n")
