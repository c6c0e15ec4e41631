"""The diagnosis names the cause from what the agent's host reader read of a real process.

Issue 14's proof: a real Python process here is made CPU-starved, sleeping on input, or
spinning one thread, after a normal phase in which four of its threads work in parallel
(hashing releases the GIL). The agent's :class:`agent.host.reader.HostReader` reads it as
it would on a node; the GPU side is the only made-up part (SM activity 0.8, falling to 0.2
when the incident starts), because this machine has no GPU. The records run at 1 Hz of
record time while the reads come every ``REAL_S`` of real time, so the rates are the
reader's own over real intervals and the detector sees its usual cadence. The child runs at
a raised priority where allowed (as root in CI), so the other test workers on the machine
do not make it wait for a CPU in the phases where it should not.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.host.reader import HostReader
from collector.detect import DetectionEngine
from telemetry.records import GpuRecord, ProcessRecord
from tests.detect.helpers import record

REAL_S = 0.1  # real seconds between two reads (one record second each)
NORMAL = 45  # records of normal work (the level counts after 30 s of it)
INCIDENT = 80  # records of the incident (a deep fall of a steady job is reported after 60 s)
UNNAMED = "the process is alive but the GPU waits for work"  # the cause line when the host names none

_CHILD = r"""
import hashlib, os, sys, threading, time
mode_file = sys.argv[1]
data = b"x" * (1 << 16)
def mode():
    try:
        with open(mode_file) as fh:
            return fh.read().strip()
    except OSError:
        return "normal"
def work(duty):  # hash (GIL released) for duty of every 20 ms
    end = time.perf_counter() + 0.02 * duty
    while time.perf_counter() < end:
        hashlib.sha256(data).digest()
    time.sleep(0.02 * (1 - duty))
def worker():
    while True:
        m = mode()
        if m in ("normal", "starved"):
            work(0.3)
        else:
            time.sleep(0.02)
for _ in range(3):
    threading.Thread(target=worker, daemon=True).start()
while True:
    m = mode()
    if m == "single":
        work(1.0)
    elif m == "input":
        work(0.05)
        time.sleep(0.05)
    else:
        work(0.9)  # the feeding thread: busy most of the time, as a training loop's main thread is
"""


def _raised() -> None:
    """In the child before exec: a raised priority (nice is per thread; its threads inherit it)."""
    with contextlib.suppress(OSError):
        os.nice(-10)


@contextlib.contextmanager
def _child(tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    mode = tmp / "mode"
    mode.write_text("normal")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(mode)], preexec_fn=_raised)
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        yield child, mode
    finally:
        for p in [child, *spinners]:
            p.kill()
            p.wait(10)


def _pin(pid: int, core: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), {core})


def _diagnose(tmp: Path, incident: str) -> list[str]:
    reader = HostReader()
    engine = DetectionEngine()
    causes: list[str] = []
    spinners: list[subprocess.Popen[bytes]] = []
    with _child(tmp) as (child, mode):
        try:
            time.sleep(0.5)  # its threads started
            for s in range(NORMAL + INCIDENT):
                if s == NORMAL:
                    if incident == "starved":  # it and seven spinners on one core
                        core = sorted(os.sched_getaffinity(0))[0]
                        _pin(child.pid, core)
                        for _ in range(7):
                            sp = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_raised)
                            os.sched_setaffinity(sp.pid, {core})
                            spinners.append(sp)
                    mode.write_text(incident)
                time.sleep(REAL_S)
                base = record(float(s), 0, sm=0.8 if s < NORMAL else 0.2, pid=None,
                              DEV_GPU_UTIL=90.0 if s < NORMAL else 25.0)
                metrics = dict(base.metrics)
                reader.read(base.gpu, [child.pid], time.monotonic(), metrics)
                rec = GpuRecord(base.ts, base.node, base.gpu, metrics, 0,
                                processes=[ProcessRecord(pid=child.pid, namespace="ns", pod="job-0")])
                for change in engine.feed(rec):
                    if change.action == "open" and change.anomaly.kind == "throughput_drop":
                        causes.extend(change.anomaly.causes)
        finally:
            for sp in spinners:
                sp.kill()
                sp.wait(10)
            reader.close()
    return causes


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="needs Linux /proc with schedstat")
@pytest.mark.parametrize(("incident", "cause"), [
    ("starved", "host CPU contention"),
    ("input", "waiting on input"),
    ("single", "a single busy thread (a Python loop, the GIL) feeds the GPU"),
])
def test_the_diagnosis_names_what_the_host_reader_read_of_a_real_process(
        tmp_path: Path, incident: str, cause: str) -> None:
    # On a 2-core machine shared with the suite's other workers the node may already be as loaded
    # before the incident as during it, and the host evidence then rightly names no cause. Such a run
    # says nothing of the diagnosis, so it runs again (at most three times in all); a wrong cause
    # named fails at once, and so does a third run that names none.
    for attempt in range(3):
        (tmp_path / str(attempt)).mkdir()
        causes = _diagnose(tmp_path / str(attempt), incident)
        assert causes, "no throughput_drop opened"
        if not causes[-1].endswith(UNNAMED):
            break
    assert causes[-1].endswith(cause), causes
