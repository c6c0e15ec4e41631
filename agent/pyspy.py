"""One py-spy capture of one process: the subprocess, its CPU time, and what went wrong in words.

Why a module of its own: :mod:`agent.profiling` decides *whether* to profile (feature on,
rate limit, CPU budget) and this one only *does* it, so tests can hand the profiler a fake
runner and still exercise the real py-spy here against a real Python process.

``py-spy record --format raw`` writes folded stacks (``outer;inner;leaf count``). It runs
with ``--nonblocking`` (the target is never paused) and ``--idle`` (a thread blocked on
input is what a throughput drop often is, and without it those samples are dropped). The
child is reaped with :func:`os.wait4`, whose resource usage is the child's own CPU time
(user + system): that is what the agent's ``profile`` CPU account is charged. A capture
that cannot run says which of the :data:`telemetry.profile.STATUSES` it hit: py-spy missing,
permission denied (no ``SYS_PTRACE``, or Yama's ``ptrace_scope``), not Python, the process
gone, a timeout, or py-spy's own last line.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from telemetry.profile import Stack, Status, parse_folded

_PYTHON_EXE = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?[dmu]*$")
_DENIED = re.compile(r"permission denied|operation not permitted|ptrace|elevated permissions", re.IGNORECASE)
_GONE = re.compile(r"no such process|os error 3\b|failed to open process", re.IGNORECASE)
_NOT_PYTHON = re.compile(r"python (version|interpreter)|not a python|failed to find python", re.IGNORECASE)
_HEADLINE = re.compile(r"^(error|permission denied)\b", re.IGNORECASE)  # not "py-spy>" chatter or a backtrace
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Capture:
    """What one capture gave: stacks, or the status and sentence saying why not; the child's CPU seconds."""

    status: Status
    reason: str = ""
    stacks: tuple[Stack, ...] = ()
    cpu_seconds: float = 0.0


class CaptureRunner(Protocol):
    def __call__(self, pid: int, duration_s: float, rate_hz: int, timeout_s: float) -> Capture: ...


def find_py_spy(configured: str | None = None) -> str | None:
    """The py-spy binary: ``configured``, else on ``PATH``, else next to this interpreter (a venv's bin)."""
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if os.access(beside, os.X_OK) else None)


def python_process(pid: int, proc: Path = Path("/proc")) -> tuple[bool | None, str]:
    """Whether ``pid`` runs Python (None: no such process), and its command line for the record.

    Its executable's name (``/proc/PID/exe``: python3.12, pypy3), else its first argument's,
    else a ``libpython`` mapped into it (uwsgi, an embedding server)."""
    base = proc / str(pid)
    try:
        command = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except FileNotFoundError:
        return None, ""
    except OSError:
        command = ""
    names: list[str] = []
    try:
        names.append(os.path.basename(os.readlink(base / "exe")))
    except FileNotFoundError:
        return (None, command) if not base.exists() else (False, command)  # a kernel thread has no exe
    except OSError:
        pass  # not ours to read without privileges: judge by the command line
    if command:
        names.append(os.path.basename(command.split(" ", 1)[0]))
    if any(_PYTHON_EXE.match(n) for n in names):
        return True, command
    try:
        with (base / "maps").open("rb") as maps:
            return any(b"libpython" in line for line in maps), command
    except FileNotFoundError:
        return None, command
    except OSError:
        return False, command


class PySpyRunner:
    """Runs ``py-spy record`` on one process (``binary`` None: py-spy is not installed)."""

    def __init__(self, binary: str | None, proc: Path = Path("/proc")) -> None:
        self.binary = binary
        self.proc = proc

    def __call__(self, pid: int, duration_s: float, rate_hz: int, timeout_s: float) -> Capture:
        if self.binary is None:
            return Capture("py_spy_missing", "py-spy is not installed on the agent (pip install 'gpuwatch[profile]', "
                                             "or GPUWATCH_PROFILE_PY_SPY=/path/to/py-spy)")
        with tempfile.TemporaryDirectory(prefix="gpuwatch-py-spy-") as tmp:
            out, err = Path(tmp) / "stacks.txt", Path(tmp) / "stderr.txt"
            argv = [self.binary, "record", "--format", "raw", "--duration", str(max(1, round(duration_s))),
                    "--rate", str(rate_hz), "--nonblocking", "--idle", "--pid", str(pid), "-o", str(out)]
            with err.open("wb") as stderr:
                try:
                    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=stderr, close_fds=True)
                except OSError as exc:
                    return Capture("py_spy_missing", f"py-spy could not be started ({self.binary}: {exc.strerror})")
                status, cpu, timed_out = _reap(child, timeout_s)
            text = err.read_text(errors="replace")
            if timed_out:
                return Capture("timeout", f"py-spy did not finish within {timeout_s:.0f} s; stopped", cpu_seconds=cpu)
            if status == 0 and out.exists():
                try:
                    stacks = parse_folded(out.read_text(errors="replace"))
                except ValueError as exc:
                    return Capture("failed", f"py-spy wrote what is not folded stacks: {exc}", cpu_seconds=cpu)
                return Capture("captured", "", tuple(stacks), cpu)
            return Capture(*self._why(pid, status, text), cpu_seconds=cpu)

    def _why(self, pid: int, status: int, stderr: str) -> tuple[Status, str]:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        first = next((line for line in lines if _HEADLINE.match(line)), lines[0] if lines else "")
        said = f"py-spy exited with {status}" + (f": {first[:300]}" if first else "")
        if _DENIED.search(stderr):
            return "permission_denied", f"{said} (the agent needs SYS_PTRACE, and ptrace must be allowed: " \
                                        "kernel.yama.ptrace_scope <= 1 as root)"
        if _GONE.search(stderr) or not (self.proc / str(pid)).exists():
            return "process_gone", f"process {pid} ended before or while it was sampled ({said})"
        if _NOT_PYTHON.search(stderr):
            return "not_python", said
        return "failed", said


def _reap(child: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, float, bool]:
    """Wait for ``child`` (killing it after ``timeout_s``): its exit status, CPU seconds, whether it timed out."""
    deadline = time.monotonic() + timeout_s
    timed_out = False
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            child.send_signal(signal.SIGKILL)
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(_POLL_S)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return child.returncode, usage.ru_utime + usage.ru_stime, timed_out
