"""CPU profiles on request: when a throughput drop opens, py-spy samples the GPU's Python processes.

Why: "the GPU waits for work" is where a GPU monitor usually stops; the stacks of the
process feeding it say what it waits on (a data loader, a lock, a Python loop). The
collector asks with a :class:`telemetry.control.ProfileRequest` (over the control topic,
or in process in ``gpuwatch up``); :meth:`Profiler.request` queues it and returns at once,
and a worker thread of its own does the rest, so sampling is never held up:

* off unless ``GPUWATCH_PROFILE=true``; when off, the answer says so (the anomaly shows it);
* for each process the agent last saw on that GPU (:meth:`Profiler.observe`, a record sink):
  gone, not Python, profiled within ``profile_period_s``, or over the CPU budget, it is
  skipped with that reason; otherwise :mod:`agent.pyspy` samples it for
  ``profile_duration_s`` at ``profile_rate_hz``;
* the CPU budget is a token bucket over the ``profile`` account of :mod:`agent.cpuclock`
  (this thread plus py-spy's own CPU, from its resource usage): ``profile_cpu_budget`` of
  a core, banked for at most one period; a capture expected to cost more than is left is
  skipped, and the answer says how much it needed and had;
* the answer, a :class:`telemetry.profile.ProfileResult` of at most ``profile_max_kb`` of
  stacks (the lightest dropped first, and said), goes to the collector on the telemetry
  topic through the agent's producer, keyed by the GPU like its frames.

Requests are queued up to :data:`QUEUE`; one more is answered ``busy``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cpuclock import ThreadCpu
from agent.pyspy import Capture, CaptureRunner, PySpyRunner, find_py_spy, python_process
from agent.stats import counter, snapshot
from telemetry.control import ProfileRequest
from telemetry.profile import MAX_STACK_CHARS, MEANING, ProcessProfile, ProfileResult, Stack, Status
from telemetry.records import GpuRecord
from telemetry.wire import Message, MessageType, partition_key, stream_headers

if TYPE_CHECKING:
    from agent.settings import AgentSettings

log = logging.getLogger(__name__)

PROFILE = "profile"  # the agent.cpuclock account of profiling (present once profiling is on)
QUEUE = 4
MAX_PROCESSES = 8  # processes of one GPU profiled per request (one after another)
COST_PER_SAMPLE_S = 0.0005  # py-spy's CPU per sample before any was measured (0.35 ms here, see benchmarks)
Submit = Callable[[Message], None]


@snapshot
class ProfilerStats:
    requests_total: int = counter("gpuwatch_agent_profile_requests", "CPU profile requests for this agent.")
    captures_total: int = counter("gpuwatch_agent_profile_captures", "Processes sampled with py-spy.")
    skipped_total: int = counter(
        "gpuwatch_agent_profile_skipped", "Processes (or requests) not profiled: off, rate limit, budget, errors.")


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    enabled: bool = False
    duration_s: float = 5.0
    rate_hz: int = 100
    period_s: float = 600.0
    max_bytes: int = 256 << 10
    cpu_budget: float = 0.01
    timeout_grace_s: float = 10.0


class CpuAllowance:
    """A token bucket of CPU seconds over one :class:`ThreadCpu` account: ``fraction`` of a core,
    banked for at most ``bank_s`` seconds of wall time (full at start)."""

    def __init__(self, cpu: ThreadCpu, account: str, fraction: float, bank_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpu, self.account, self.fraction, self.clock = cpu, account, fraction, clock
        self.capacity = fraction * bank_s
        self.balance = self.capacity
        self._at = clock()
        self._spent = cpu.seconds(account)

    def left(self) -> float:
        now, spent = self.clock(), self.cpu.seconds(self.account)
        self.balance = min(self.capacity, self.balance + self.fraction * (now - self._at)) - (spent - self._spent)
        self._at, self._spent = now, spent
        return self.balance


class Profiler:
    """Answers profile requests for ``node``/``instance``; ``submit`` sends each answer."""

    def __init__(self, config: ProfileConfig, node: str, instance: str, submit: Submit, *,
                 runner: CaptureRunner | None = None, cpu: ThreadCpu | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 proc: Path = Path("/proc"), simulated: bool = False) -> None:
        self.config, self.node, self.instance, self.submit = config, node, instance, submit
        self.runner: CaptureRunner = runner or PySpyRunner(None, proc)
        self.cpu = cpu or ThreadCpu()
        self.clock, self.wall, self.proc, self.simulated = clock, wall, proc, simulated
        self.headers = stream_headers(MessageType.PROFILE, node, instance)
        self.allowance = CpuAllowance(self.cpu, PROFILE, config.cpu_budget, config.period_s, clock)
        self._pids: dict[str, tuple[int, ...]] = {}
        self._last: dict[int, float] = {}  # pid -> clock() of its last capture
        self._cost_per_sample = COST_PER_SAMPLE_S
        self._queue: queue.Queue[ProfileRequest | None] = queue.Queue(QUEUE)
        self._thread: threading.Thread | None = None
        self.requests_total = self.captures_total = self.skipped_total = 0

    def stats(self) -> ProfilerStats:
        return ProfilerStats(requests_total=self.requests_total, captures_total=self.captures_total,
                             skipped_total=self.skipped_total)

    # ---- from the agent's threads ----
    def observe(self, record: GpuRecord) -> None:
        """A record sink: the processes each GPU had at its newest sample."""
        pids = tuple(p.pid for p in record.processes)
        if self._pids.get(record.gpu) != pids:
            self._pids[record.gpu] = pids

    def request(self, req: ProfileRequest) -> None:
        """Queue ``req`` (from the control thread; never blocks); answered at once when off or full."""
        if not req.matches(self.node, self.instance):
            return
        self.requests_total += 1
        if not self.config.enabled:
            self._send(self._whole(req, "disabled"))
            return
        try:
            self._queue.put_nowait(req)
        except queue.Full:
            self._send(self._whole(req, "busy", f"{QUEUE} profile requests were already waiting"))

    # ---- the worker ----
    def start(self) -> None:
        if self.config.enabled and self._thread is None:
            self._thread = self.cpu.spawn(PROFILE, self._run, "gpuwatch-profiler")
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the capture under way (py-spy stops by itself within its duration)."""
        if self._thread is None:
            return
        while True:  # what is still queued is dropped: the collector's anomaly keeps "requested"
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while (req := self._queue.get()) is not None:
            self._send(self.handle(req))

    def handle(self, req: ProfileRequest) -> ProfileResult:
        """Profile the processes on ``req.gpu`` one after another (on the calling thread)."""
        if self.simulated:
            return self._whole(req, "no_process", "simulated GPUs: their processes are not real, there is nothing "
                                                  "to profile")
        pids = self._pids.get(req.gpu, ())
        if not pids:
            return self._whole(req, "no_process", f"no process was on {req.gpu} at its last sample")
        share = self.config.max_bytes // min(len(pids), MAX_PROCESSES)
        out = [self._one(pid, share) for pid in pids[:MAX_PROCESSES]]
        for p in out:
            if p.status == "captured":
                self.captures_total += 1
            else:
                self.skipped_total += 1
        return ProfileResult(self.node, req.gpu, req.anomaly, self.wall(), tuple(out))

    def _one(self, pid: int, max_bytes: int) -> ProcessProfile:
        cfg = self.config
        if pid == os.getpid():
            return ProcessProfile(pid, "not_python", "this is the agent's own process")
        python, command = python_process(pid, self.proc)
        if python is None:
            return ProcessProfile(pid, "process_gone", f"process {pid} is no longer running")
        if not python:
            return ProcessProfile(pid, "not_python", f"{command[:200] or 'the process'} is not a Python program",
                                  command)
        now = self.clock()
        last = self._last.get(pid)
        if last is not None and now - last < cfg.period_s:
            return ProcessProfile(pid, "rate_limited", f"process {pid} was profiled {now - last:.0f} s ago; at most "
                                  f"once every {cfg.period_s:.0f} s (GPUWATCH_PROFILE_PERIOD_S)", command)
        need = self._cost_per_sample * cfg.duration_s * cfg.rate_hz
        left = self.allowance.left()
        if need > left:
            return ProcessProfile(pid, "cpu_budget", f"a capture needs about {need:.2f} CPU-s, the budget has "
                                  f"{max(left, 0.0):.2f} left ({100 * cfg.cpu_budget:g}% of a core, "
                                  "GPUWATCH_PROFILE_CPU_BUDGET)", command)
        self._last = {p: t for p, t in self._last.items() if now - t < cfg.period_s}
        self._last[pid] = now
        capture = self.runner(pid, cfg.duration_s, cfg.rate_hz, cfg.duration_s + cfg.timeout_grace_s)
        self.cpu.add(PROFILE, capture.cpu_seconds)
        return self._result(pid, command, capture, max_bytes)

    def _result(self, pid: int, command: str, capture: Capture, max_bytes: int) -> ProcessProfile:
        if capture.status != "captured":
            log.info("no CPU profile of process %d: %s", pid, capture.reason or MEANING[capture.status])
            return ProcessProfile(pid, capture.status, capture.reason or MEANING[capture.status], command)
        samples = sum(n for _, n in capture.stacks)
        if samples and capture.cpu_seconds > 0:
            self._cost_per_sample = capture.cpu_seconds / samples
        stacks, dropped = fit(capture.stacks, max_bytes)
        reason = f"{samples} samples at {self.config.rate_hz} Hz over {self.config.duration_s:g} s"
        if dropped:
            reason += f"; the {dropped} lightest stacks dropped to fit {max_bytes >> 10} KiB (GPUWATCH_PROFILE_MAX_KB)"
        return ProcessProfile(pid, "captured", reason, command, stacks)

    def _whole(self, req: ProfileRequest, status: Status, reason: str = "") -> ProfileResult:
        self.skipped_total += 1
        return ProfileResult(self.node, req.gpu, req.anomaly, self.wall(), (), status, reason or MEANING[status])

    def _send(self, result: ProfileResult) -> None:
        self.submit(Message(partition_key(self.node), result.encode(), self.headers))


def fit(stacks: Sequence[Stack], max_bytes: int) -> tuple[tuple[Stack, ...], int]:
    """The heaviest stacks whose text fits ``max_bytes`` (an over-long stack keeps its leaf end),
    and how many were dropped."""
    kept: list[Stack] = []
    size = 0
    ordered = sorted(stacks, key=lambda s: -s[1])
    for i, (stack, n) in enumerate(ordered):
        if len(stack) > MAX_STACK_CHARS:
            stack = "[frames cut];" + stack[-(MAX_STACK_CHARS - 20):].split(";", 1)[-1]
        cost = len(stack.encode()) + 16
        if size + cost > max_bytes:
            return tuple(kept), len(ordered) - i
        kept.append((stack, n))
        size += cost
    return tuple(kept), 0


def from_settings(settings: AgentSettings, instance: str, submit: Submit, cpu: ThreadCpu) -> Profiler:
    """The profiler of an agent's settings."""
    s = settings
    config = ProfileConfig(enabled=s.profile, duration_s=s.profile_duration_s, rate_hz=s.profile_rate_hz,
                           period_s=s.profile_period_s, max_bytes=s.profile_max_kb << 10,
                           cpu_budget=s.profile_cpu_budget)
    binary = find_py_spy(s.profile_py_spy) if config.enabled else None
    if config.enabled:
        log.info("CPU profiles on request: py-spy %s, %g s at %d Hz, at most one per process every %g s",
                 binary or "NOT FOUND (answers will say so)", config.duration_s, config.rate_hz, config.period_s)
    return Profiler(config, s.node_name, instance, submit, runner=PySpyRunner(binary), cpu=cpu,
                    simulated=bool(s.simulate))
