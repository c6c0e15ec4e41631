"""The host evidence (agent.host): fake /proc and cgroup trees, this machine's real files, real processes.

Why these tests: the rows are rates the lead's diagnosis weighs (CPU-starved, sleeping on
input, one busy thread, throttled), so each is checked against counters whose answer is
known (fake trees for cgroup v1 and v2, with and without PSI), against the real files of
this machine (v1 hybrid with PSI), and against real child processes made to starve, sleep
or spin, read through the same reader the agent runs. A value that cannot be read is
absent, never 0, and never an exception into sampling.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.host import HostReader
from agent.host.cgroup import CgroupDirs, locate
from telemetry import keys as k
from telemetry.catalog import HOST_KEYS
from tests.support.hostfs import write_cgroup_v1, write_cgroup_v2, write_node, write_process
from tests.support.poll import wait_until

V2_PATH = "/kubepods.slice/pod-a.slice/cri-containerd-a.scope"
V1_PATH = "/kubepods/burstable/poda/abc"
PSI = {"cpu": 1_000_000, "memory": 0, "io": 500_000}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _tree_v2(tmp: Path, tick: int) -> tuple[Path, Path]:
    """Tick 0, then tick 1 one second later: every counter advanced by a known amount."""
    proc, cg = tmp / "proc", tmp / "cgroup"
    write_process(proc, 42, utime=100 + 150 * tick, stime=50 + 10 * tick, cgroup=f"0::{V2_PATH}\n", threads={
        42: ("S", 10**9 + tick * 900_000_000, 5 * 10**8 + tick * 50_000_000),  # the busy one: 0.9 s run, 0.05 s wait
        43: ("D", 10**9 + tick * 100_000_000, 10**8 + tick * 250_000_000),
        44: ("S", 10**9, 10**8),
    })
    write_node(proc, idle=1000 + 50 * tick, busy=1000 + 150 * tick, psi_us={
        "cpu": PSI["cpu"] + tick * 700_000, "memory": PSI["memory"] + tick * 10_000, "io": PSI["io"]})
    write_cgroup_v2(cg, V2_PATH, usage_us=10**7 + tick * 1_600_000, periods=100 + 10 * tick, throttled=5 + 8 * tick)
    return proc, cg


def test_cgroup_v2_with_psi_gives_every_row_as_a_rate_over_the_gpus_interval(tmp_path: Path) -> None:
    clock = Clock()
    proc, cg = _tree_v2(tmp_path, 0)
    reader = HostReader(str(proc), str(cg), clock=clock)
    first: dict[str, float] = {}
    reader.read("GPU-a", [42], 1.0, first)
    # a first reading has no rates: only what holds at the sample (state D, the limit)
    assert first == {k.PROCESS_BLOCKED_THREADS: 1, k.CONTAINER_CPU_LIMIT_CORES: 2.0}
    _tree_v2(tmp_path, 1)
    clock.t += 1.0
    out: dict[str, float] = {}
    reader.read("GPU-a", [42], 2.0, out)
    assert set(out) == set(HOST_KEYS)
    assert out[k.PROCESS_CPU_CORES] == pytest.approx(1.6)  # 160 ticks of 1/100 s in 1 s
    assert out[k.PROCESS_BUSIEST_THREAD_RATIO] == pytest.approx(0.9)
    assert out[k.PROCESS_RUNQUEUE_WAIT_CORES] == pytest.approx(0.3)  # 0.05 + 0.25 s waited in 1 s
    assert out[k.PROCESS_SLEEPING_RATIO] == pytest.approx(0.05)  # 1 - (0.9 + 0.05)
    assert out[k.PROCESS_BLOCKED_THREADS] == 1
    assert out[k.CONTAINER_CPU_USAGE_CORES] == pytest.approx(1.6)
    assert out[k.CONTAINER_CPU_LIMIT_CORES] == pytest.approx(2.0)
    assert out[k.CONTAINER_CPU_THROTTLED_RATIO] == pytest.approx(0.8)
    assert out[k.NODE_CPU_BUSY_RATIO] == pytest.approx(0.75)
    assert out[k.NODE_PRESSURE_CPU_WAITING_RATIO] == pytest.approx(0.7)
    assert out[k.NODE_PRESSURE_MEMORY_WAITING_RATIO] == pytest.approx(0.01)
    assert out[k.NODE_PRESSURE_IO_WAITING_RATIO] == 0.0
    assert not reader.errors


def test_each_gpu_rates_over_its_own_interval_and_a_tick_reads_each_file_once(tmp_path: Path) -> None:
    clock = Clock()
    proc, cg = _tree_v2(tmp_path, 0)
    reader = HostReader(str(proc), str(cg), clock=clock)
    reads: list[str] = []
    real = reader.files.read
    reader.files.read = lambda path: reads.append(path) or real(path)  # type: ignore[method-assign]
    reader.read("GPU-a", [42], 1.0, {})
    _tree_v2(tmp_path, 1)
    clock.t += 1.0
    reads.clear()
    a: dict[str, float] = {}
    b: dict[str, float] = {}
    reader.read("GPU-a", [42], 2.0, a)
    reader.read("GPU-b", [42], 2.0, b)  # the same process on a second GPU, the same tick
    assert len(reads) == len(set(reads))  # nothing read twice in one tick
    assert a[k.PROCESS_CPU_CORES] == pytest.approx(1.6)
    assert set(b) == {k.PROCESS_BLOCKED_THREADS, k.CONTAINER_CPU_LIMIT_CORES}  # GPU-b's first sample


def test_between_full_passes_only_the_busiest_threads_are_read_and_a_new_busiest_is_caught_at_the_next(
        tmp_path: Path) -> None:
    """Full pass every 5 s; in between, the one busiest thread of the last pass only. Thread 52
    starts spinning right after a pass: it shows at the next pass and is read every tick after."""
    clock = Clock()
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    reader = HostReader(str(proc), str(cg), clock=clock, full_every_s=5.0, track_threads=1)
    reads: list[str] = []
    real = reader.files.read
    reader.files.read = lambda path: reads.append(path) or real(path)  # type: ignore[method-assign]
    outs: dict[int, dict[str, float]] = {}
    for tick in range(8):
        spin = max(0, tick - 1)  # seconds 52 has spun by this tick; 50 spun until tick 1
        write_process(proc, 50, utime=100 * min(tick, 1) + 90 * spin, stime=0, cgroup=f"0::{V2_PATH}\n", threads={
            50: ("S", 900_000_000 * min(tick, 1), 0),
            51: ("D", 0, 0),
            52: ("S", 900_000_000 * spin, 100_000_000 * spin),
        })
        write_node(proc, idle=1, busy=1 + tick, psi_us=PSI)
        write_cgroup_v2(cg, V2_PATH, usage_us=tick, periods=tick, throttled=0)
        reads.clear()
        outs[tick] = {}
        reader.read("GPU-a", [50], float(tick), outs[tick])
        threads_read = {int(p.split("/")[-2]) for p in reads if "/task/" in p}
        if tick in (0, 1, 6):
            assert threads_read == {50, 51, 52}, tick  # full passes: the first two (no rates yet), then 5 s on
        elif tick < 6:
            assert threads_read == {50}, tick  # the busiest of the last pass only
        else:
            assert threads_read == {52}, tick  # the new busiest, tracked from the pass that found it
        clock.t += 1.0
    assert outs[1][k.PROCESS_BUSIEST_THREAD_RATIO] == pytest.approx(0.9)  # thread 50
    assert outs[3][k.PROCESS_BUSIEST_THREAD_RATIO] == pytest.approx(0.0)  # 50 idles; 52 as of the last pass
    assert outs[3][k.PROCESS_CPU_CORES] == pytest.approx(0.9)  # the process total is read every sample
    assert outs[3][k.PROCESS_BLOCKED_THREADS] == 1  # 51 in D at the last pass
    assert outs[6][k.PROCESS_BUSIEST_THREAD_RATIO] == pytest.approx(0.9)  # caught within one full pass
    assert outs[6][k.PROCESS_RUNQUEUE_WAIT_CORES] == pytest.approx(0.1)
    assert outs[7][k.PROCESS_BUSIEST_THREAD_RATIO] == pytest.approx(0.9)  # over the GPU's own 1 s now
    assert outs[7][k.PROCESS_SLEEPING_RATIO] == pytest.approx(0.0)  # 1 - (0.9 run + 0.1 wait)
    assert outs[7][k.PROCESS_RUNQUEUE_WAIT_CORES] == pytest.approx(0.1)
    assert reader.threads.full_passes == 3
    assert not reader.errors


def test_cgroup_v1_without_psi_reads_cpuacct_and_cfs_and_leaves_pressure_absent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    text = f"12:memory:{V1_PATH}\n4:cpu,cpuacct:{V1_PATH}\n1:name=systemd:{V1_PATH}\n"
    reader = HostReader(str(proc), str(cg), clock=clock)
    for tick in (0, 1):
        write_process(proc, 7, utime=10 + 30 * tick, stime=0, cgroup=text, threads={7: ("R", tick * 300_000_000, 0)})
        write_node(proc, idle=500 + 100 * tick, busy=500, psi_us=None)
        write_cgroup_v1(cg, V1_PATH, usage_ns=tick * 300_000_000, periods=10 * tick, throttled=0)
        out: dict[str, float] = {}
        with caplog.at_level(logging.INFO, logger="agent.host.reader"):
            reader.read("GPU-a", [7], float(tick), out)
        clock.t += 0.5
    assert out[k.PROCESS_CPU_CORES] == pytest.approx(0.6)
    assert out[k.CONTAINER_CPU_USAGE_CORES] == pytest.approx(0.6)
    assert out[k.CONTAINER_CPU_LIMIT_CORES] == pytest.approx(1.5)
    assert out[k.CONTAINER_CPU_THROTTLED_RATIO] == 0.0
    assert out[k.NODE_CPU_BUSY_RATIO] == 0.0
    assert not any(key.startswith("gpuwatch_node_pressure") for key in out)  # no PSI: absent, not 0
    assert reader.errors == {"host_psi:FileNotFoundError": 3}  # once per resource, then no longer asked
    assert sum("pressure" in r.getMessage() for r in caplog.records) == 1  # one line, not one per tick


def test_locate_finds_the_cpu_directories_of_v1_hybrid_and_v2_hosts(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert locate("4:cpu,cpuacct:/a\n0::/b\n", root) == CgroupDirs(1, f"{root}/cpu,cpuacct/a", f"{root}/cpu,cpuacct/a")
    assert locate("3:cpuacct:/a\n2:cpu:/a\n", root) == CgroupDirs(1, f"{root}/cpu/a", f"{root}/cpuacct/a")
    assert locate("0::/b\n", root) == CgroupDirs(2, f"{root}/unified/b", None)  # hybrid: v2 under unified
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    assert locate("0::/b\n", root) == CgroupDirs(2, f"{root}/b", None)
    assert locate("0::/../../escape\n", root) is None  # outside the reader's cgroup namespace
    assert locate("not a cgroup file", root) is None


def test_unlimited_and_periodless_containers_and_exited_processes_are_absent(tmp_path: Path) -> None:
    clock = Clock()
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    reader = HostReader(str(proc), str(cg), clock=clock)
    for tick in (0, 1):
        write_process(proc, 9, utime=tick, stime=0, cgroup=f"0::{V2_PATH}\n", threads={9: ("S", tick, 0)})
        write_node(proc, idle=10 + tick, busy=10, psi_us=PSI)
        write_cgroup_v2(cg, V2_PATH, usage_us=tick, periods=0, throttled=0, cpu_max="max 100000")
        out: dict[str, float] = {}
        reader.read("GPU-a", [9, 31337], float(tick), out)  # 31337 never existed
        clock.t += 1.0
    assert k.CONTAINER_CPU_LIMIT_CORES not in out
    assert k.CONTAINER_CPU_THROTTLED_RATIO not in out
    assert out[k.PROCESS_CPU_CORES] == pytest.approx(0.01)
    assert reader.errors["host_process:FileNotFoundError"] == 2
    # pid 9 exits: its rows go, the node's stay. /proc fails a kept descriptor of an exited
    # process (ESRCH, test_a_real_process_that_exits_loses_its_rows); a deleted plain file
    # stays readable through one, so the fake's descriptors are closed as /proc's would fail
    for path in sorted((proc / "9").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (proc / "9").rmdir()
    reader.files.close()
    write_node(proc, idle=13, busy=11, psi_us=PSI)
    gone: dict[str, float] = {}
    reader.read("GPU-a", [9], 2.0, gone)
    assert set(gone) == {k.NODE_CPU_BUSY_RATIO, *(key for key in HOST_KEYS if "pressure" in key)}


def test_a_reused_pid_is_a_new_process_not_a_rate(tmp_path: Path) -> None:
    clock = Clock()
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    reader = HostReader(str(proc), str(cg), clock=clock, processes=True)
    for tick, start in ((0, 5000), (1, 9000)):
        write_process(proc, 5, utime=1000 * (1 - tick), stime=0, start=start, cgroup=f"0::{V2_PATH}\n",
                      threads={5: ("S", 0, 0)})
        write_node(proc, idle=1, busy=1, psi_us=None)
        out: dict[str, float] = {}
        reader.read("GPU-a", [5], float(tick), out)
        clock.t += 1.0
    assert k.PROCESS_CPU_CORES not in out


def test_the_real_files_of_this_machine() -> None:
    """This machine: cgroup v1 hybrid (or v2), with PSI; the test's own process, spinning a little."""
    reader = HostReader()
    ticks = itertools.count(1)
    reader.read("GPU-r", [os.getpid()], next(ticks), {})

    def spun() -> dict[str, float] | None:
        x = 0
        for i in range(200_000):
            x += i
        out: dict[str, float] = {}
        reader.read("GPU-r", [os.getpid()], next(ticks), out)
        # the node's busy ratio needs /proc/stat's total to have moved too: two reads within one
        # clock tick of it (on a loaded 2-core machine the process's own time can move first) give none
        return out if out.get(k.PROCESS_CPU_CORES, 0.0) > 0 and k.NODE_CPU_BUSY_RATIO in out else None

    out = wait_until(spun, timeout=20, what="CPU time of this process and of the node")
    assert {k.PROCESS_CPU_CORES, k.PROCESS_BUSIEST_THREAD_RATIO, k.PROCESS_RUNQUEUE_WAIT_CORES,
            k.PROCESS_SLEEPING_RATIO, k.PROCESS_BLOCKED_THREADS, k.NODE_CPU_BUSY_RATIO} <= set(out)
    if Path("/proc/pressure/cpu").exists():
        assert k.NODE_PRESSURE_CPU_WAITING_RATIO in out
    assert k.CONTAINER_CPU_USAGE_CORES in out  # cpuacct (v1) or cpu.stat (v2) of the test's cgroup
    for key, value in out.items():
        assert value >= 0, key
        if key.endswith("_ratio"):
            assert value <= 1, key
    assert not reader.errors, reader.errors


# ---- real processes: starved, sleeping on input, one spinning thread ----------------

_CHILD = {
    "spin": "while True: pass",
    "sleep": "import time\nwhile True: time.sleep(0.01)",
    "thread": "import threading, time\n"
              "threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()\n"
              "while True: time.sleep(1)",
}


def _spawn(kind: str, cpu: int | None = None) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD[kind]])
    if cpu is not None:
        os.sched_setaffinity(child.pid, {cpu})
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        child.kill()
    for child in started:
        child.wait(10)


def _reading(reader: HostReader, pid: int, gpu: str) -> dict[str, float]:
    out: dict[str, float] = {}
    reader.read(gpu, [pid], float(reader.clock()), out)
    return out


def _settled(reader: HostReader, pid: int, gpu: str, holds: object) -> dict[str, float]:
    """Read every ~0.3 s until ``holds(reading)``; the reading's own interval is the poll's."""
    last: dict[str, dict[str, float]] = {}

    def probe() -> dict[str, float] | None:
        out = _reading(reader, pid, gpu)
        last["out"] = out
        return out if k.PROCESS_CPU_CORES in out and holds(out) else None  # type: ignore[operator]

    _reading(reader, pid, gpu)
    return wait_until(probe, timeout=15, interval=0.3, what=f"host evidence of pid {pid} on {gpu}",
                      details=lambda: last.get("out"))


def test_a_cpu_starved_process_shows_runqueue_wait(children: list[subprocess.Popen[bytes]]) -> None:
    core = sorted(os.sched_getaffinity(0))[0]
    victim = _spawn("spin", core)
    children.append(victim)
    children.extend(_spawn("spin", core) for _ in range(3))  # three neighbours on its one core
    out = _settled(HostReader(), victim.pid, "GPU-starved",
                   lambda o: o[k.PROCESS_RUNQUEUE_WAIT_CORES] > 0.5)
    assert out[k.PROCESS_BUSIEST_THREAD_RATIO] < 0.5  # it gets a share of the core, not the core
    assert out[k.PROCESS_SLEEPING_RATIO] < 0.2  # it never sleeps: it waits for the CPU


def test_a_process_sleeping_on_input_shows_a_sleeping_ratio_near_one(children: list[subprocess.Popen[bytes]]) -> None:
    sleeper = _spawn("sleep")
    children.append(sleeper)
    out = _settled(HostReader(), sleeper.pid, "GPU-sleep", lambda o: o[k.PROCESS_SLEEPING_RATIO] > 0.8)
    assert out[k.PROCESS_CPU_CORES] < 0.3
    assert out[k.PROCESS_BUSIEST_THREAD_RATIO] < 0.3


def test_one_spinning_thread_shows_a_busiest_thread_ratio_near_one(children: list[subprocess.Popen[bytes]]) -> None:
    spinner = _spawn("thread")
    children.append(spinner)
    # the busiest thread is read over the last full pass or the interval, the process's CPU over the
    # interval: on a loaded CI machine one short interval can miss the thread's turn, so the reading
    # is awaited in which both agree (seen in CI: busiest 1.0, process 0.0 over one 0.3-s interval)
    out = _settled(HostReader(), spinner.pid, "GPU-thread", lambda o: o[k.PROCESS_BUSIEST_THREAD_RATIO] > 0.6
                   and abs(o[k.PROCESS_CPU_CORES] - o[k.PROCESS_BUSIEST_THREAD_RATIO]) <= 0.3)
    assert out[k.PROCESS_SLEEPING_RATIO] < 0.4
    assert out[k.PROCESS_CPU_CORES] == pytest.approx(out[k.PROCESS_BUSIEST_THREAD_RATIO], abs=0.3)
