"""A fake ``/proc`` for the attributor: ``/proc/<pid>/{stat,comm,cgroup}`` written as the kernel formats them.

Shared by the attribution tests and ``benchmarks/bench_attribution.py``, which time the
same attributor on the same files.
"""

from __future__ import annotations

from pathlib import Path

HOST_CGROUP = "0::/system.slice/sshd.service\n"


def write_proc(root: Path, pid: int, *, comm: str = "python3", cgroup: str = HOST_CGROUP, start: int = 81234) -> None:
    """Write /proc/<pid>/{stat,comm,cgroup} as the kernel formats them."""
    proc = root / str(pid)
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "comm").write_text(comm + "\n")
    (proc / "cgroup").write_text(cgroup)
    # Fields 3..52 after "pid (comm)"; field 22 is the start time in clock ticks since boot.
    after_comm = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "19872", "0", "12", "0", "8731", "1204"]
    after_comm += ["0", "0", "20", "0", "48", "0", str(start), "73844121600", "2211840"]
    after_comm += ["0"] * (52 - 2 - len(after_comm))
    (proc / "stat").write_text(f"{pid} ({comm}) " + " ".join(after_comm) + "\n")
