"""The agent's CPU profiles: real py-spy against a real Python process, and every way a capture
is declined (off, not Python, gone, rate limit, CPU budget, py-spy missing, no permission, busy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cpuclock import ThreadCpu
from agent.profiling import PROFILE, QUEUE, ProfileConfig, Profiler, fit
from agent.pyspy import Capture, PySpyRunner, find_py_spy, python_process
from telemetry.control import ProfileRequest
from telemetry.profile import ProfileResult
from telemetry.records import GpuRecord, ProcessRecord
from telemetry.wire import Message, MessageType
from tests.support.poll import wait_until

GPU = "GPU-11111111-2222-3333-4444-555555555555"
BUSY = textwrap.dedent("""
    import sys, time
    def gpuwatch_busy_marker():
        x = 0
        while True:
            x += 1
    print("ready", flush=True)
    gpuwatch_busy_marker()
""")


def _child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if "ready" in code:
        assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def busy() -> Iterator[int]:
    proc = _child(BUSY)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = _child("import time; print('ready', flush=True); time.sleep(120)")
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


class Sent:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)

    def results(self) -> list[ProfileResult]:
        return [ProfileResult.decode(m.value) for m in self.messages]


def _record(*pids: int) -> GpuRecord:
    return GpuRecord(1.0, "node-x", GPU, {}, processes=[ProcessRecord(pid=p) for p in pids])


def _request(anomaly: int = 7) -> ProfileRequest:
    return ProfileRequest("node-x", GPU, anomaly, 1.0)


class FakeRunner:
    def __init__(self, cpu_seconds: float = 0.01) -> None:
        self.calls: list[int] = []
        self.cpu_seconds = cpu_seconds

    def __call__(self, pid: int, duration_s: float, rate_hz: int, timeout_s: float) -> Capture:
        self.calls.append(pid)
        return Capture("captured", "", (("main;work", 400), ("main;idle", 100)), self.cpu_seconds)


def _profiler(sent: Sent, runner: object = None, clock: list[float] | None = None, **config: object) -> Profiler:
    now = clock if clock is not None else [0.0]
    cfg = ProfileConfig(**{"enabled": True, "duration_s": 1.0, **config})  # type: ignore[arg-type]
    return Profiler(cfg, "node-x", "inst-1", sent, runner=runner, clock=lambda: now[0])  # type: ignore[arg-type]


def test_py_spy_samples_a_real_python_process_and_its_cpu_is_counted(busy: int) -> None:
    binary = find_py_spy()
    assert binary, "py-spy is in the dev extra (pip install -e '.[dev]')"
    sent, cpu = Sent(), ThreadCpu()
    profiler = Profiler(ProfileConfig(enabled=True, duration_s=1.0, rate_hz=100), "node-x", "inst-1", sent,
                        runner=PySpyRunner(binary), cpu=cpu)
    profiler.observe(_record(busy))
    profiler.start()
    try:
        profiler.request(_request(42))
        wait_until(lambda: sent.messages or None, timeout=30, interval=0.1, what="the profile answer")
    finally:
        profiler.stop()
    msg = sent.messages[0]
    assert msg.key == b"node-x" and MessageType.of(dict(msg.headers)["type"]) is MessageType.PROFILE
    result = sent.results()[0]
    assert (result.anomaly, result.gpu, result.node) == (42, GPU, "node-x")
    [proc] = result.processes
    assert proc.status == "captured", proc.reason
    assert proc.pid == busy and "-c" in proc.command
    assert any("gpuwatch_busy_marker" in stack for stack, _ in proc.stacks), proc.stacks[:5]
    assert 50 <= proc.samples <= 150  # about 1 s at 100 Hz
    assert result.overall[0] == "captured"
    assert cpu.seconds(PROFILE) > 0  # py-spy's own CPU (its rusage) charged to the profile account
    assert profiler.stats().captures_total == 1


def test_permission_denied_is_said_when_py_spy_may_not_attach(busy: int, tmp_path: Path) -> None:
    """py-spy run as an unprivileged user (no ptrace over root's process): the answer says so."""
    binary = find_py_spy()
    assert binary
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {binary} \"$@\"\n")
    wrapper.chmod(0o755)
    capture = PySpyRunner(str(wrapper))(busy, 1.0, 100, 20.0)
    assert capture.status == "permission_denied", capture
    assert "SYS_PTRACE" in capture.reason and "Permission Denied" in capture.reason


def test_not_python_and_gone_processes_are_declined_with_their_reason() -> None:
    sent = Sent()
    runner = FakeRunner()
    profiler = _profiler(sent, runner)
    other = subprocess.Popen(["sleep", "60"])
    gone = subprocess.Popen(["true"])
    gone.wait(10)
    try:
        profiler.observe(_record(other.pid, gone.pid, os.getpid()))
        result = profiler.handle(_request())
    finally:
        other.kill()
        other.wait(10)
    statuses = [(p.status, p.reason) for p in result.processes]
    assert statuses[0][0] == "not_python" and "sleep 60" in statuses[0][1]
    assert statuses[1] == ("process_gone", f"process {gone.pid} is no longer running")
    assert statuses[2][0] == "not_python" and "agent's own" in statuses[2][1]
    assert runner.calls == [] and result.overall[0] == "not_python"
    assert python_process(os.getpid())[0] is True  # this interpreter is Python
    assert python_process(gone.pid) == (None, "")


def test_rate_limited_per_process_and_the_cpu_budget_skips_with_numbers(sleeper: int) -> None:
    sent, runner, clock = Sent(), FakeRunner(cpu_seconds=0.02), [100.0]
    profiler = _profiler(sent, runner, clock, period_s=600.0, cpu_budget=0.01)
    profiler.observe(_record(sleeper))
    first = profiler.handle(_request(1)).processes[0]
    assert first.status == "captured" and first.samples == 500
    clock[0] += 60
    second = profiler.handle(_request(2)).processes[0]
    assert second.status == "rate_limited" and "60 s ago" in second.reason and "600 s" in second.reason
    clock[0] += 600
    assert profiler.handle(_request(3)).processes[0].status == "captured"
    assert runner.calls == [sleeper, sleeper]
    # a capture that costs more than the bank (0.01 of a core for 600 s: 6 CPU-s) empties it
    expensive = FakeRunner(cpu_seconds=50.0)
    profiler.runner = expensive
    clock[0] += 601
    assert profiler.handle(_request(4)).processes[0].status == "captured"
    clock[0] += 601
    skipped = profiler.handle(_request(5)).processes[0]
    assert skipped.status == "cpu_budget" and "needs about" in skipped.reason and "1% of a core" in skipped.reason
    assert expensive.calls == [sleeper]


def test_off_missing_py_spy_no_process_and_a_full_queue_each_answer(sleeper: int) -> None:
    sent = Sent()
    off = Profiler(ProfileConfig(enabled=False), "node-x", "inst-1", sent)
    off.request(_request(9))
    off.request(ProfileRequest("other-node", GPU, 9, 1.0))  # not for this agent: no answer
    [answer] = sent.results()
    assert (answer.status, answer.anomaly, answer.processes) == ("disabled", 9, ())
    assert "GPUWATCH_PROFILE=true" in answer.overall[1]

    missing = _profiler(Sent(), PySpyRunner(None))
    missing.observe(_record(sleeper))
    proc = missing.handle(_request()).processes[0]
    assert proc.status == "py_spy_missing" and "pip install" in proc.reason
    assert _profiler(Sent(), FakeRunner()).handle(_request()).status == "no_process"

    full = Sent()
    waiting = _profiler(full, FakeRunner())  # not started: requests stay queued
    for n in range(QUEUE + 1):
        waiting.request(_request(n + 1))
    [busy] = full.results()
    assert busy.status == "busy" and busy.anomaly == QUEUE + 1


def test_the_answer_is_bounded_heaviest_stacks_first() -> None:
    stacks = [(f"main;f{i}", i + 1) for i in range(1000)] + [("x;" * 20_000 + "leaf", 5)]
    kept, dropped = fit(stacks, 4096)
    assert sum(len(s) + 16 for s, _ in kept) <= 4096 and dropped == len(stacks) - len(kept) > 0
    assert [n for _, n in kept] == sorted((n for _, n in kept), reverse=True) and kept[0] == ("main;f999", 1000)
    long_kept, _ = fit([("x;" * 20_000 + "leaf", 5)], 1 << 20)
    assert long_kept[0][0].startswith("[frames cut];") and long_kept[0][0].endswith(";leaf")
    result = ProfileResult("n", GPU, 1, 1.0)
    assert ProfileResult.decode(result.encode()) == result
