"""Host and inference-server evidence: what the agent read beside the GPU, weighed for a fall.

Why: a fall of SM activity with the process alive has many causes that the GPU's own
counters cannot tell apart (an input stall and host CPU contention read the same on the
H200). The agent now reads the host's side (``/proc``, the container's cgroup, the node's
pressure-stall information) and the inference server's own figures, as catalog rows of the
GPU record. This module keeps a thinned history of them per GPU and, when a fall is judged,
compares the minutes before it with the time since it began:

* **demand** (the server completes fewer requests and its queue did not grow): not a fault,
  the fall is the traffic's; the caller reports no ``throughput_drop`` at all;
* **queue growing** while the GPU does less: the bottleneck is in front of the GPU;
* **CFS throttling** of the container: its CPU limit starves the feeding threads;
* **host CPU contention**: the node's CPU pressure, or the process's time runnable but
  waiting for a CPU, rose;
* **a single busy thread** (a Python loop, the GIL): one thread at a full core feeds the GPU;
* **waiting on input**: the feeding thread sleeps, threads blocked on I/O, PCIe receive
  fell;
* otherwise it says what it checked and that none of it changed, or that the agent sent no
  host evidence (an older agent, or a host without the files).

Each verdict names its numbers. A verdict that is a host-side cause is also *evidence of
lost capacity* (issue 17 asks for it before a demand-driven workload's fall is a fault), so
the throughput detector may report such a fall as a steady job's rather than waiting for a
step. The thresholds are physical, not fitted to a trace: throttling in a quarter of the
periods, a fifth of wall time with a runnable task waiting, a thread at 85% of a core.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from typing import Final

from collector.detect.level import IDLE
from telemetry import keys as k

EVERY: Final = 2.0  # seconds between two kept readings (the agent's host reads are per sample, 1 Hz)
_KEEP: Final = 300  # readings kept: 10 minutes at EVERY
BEFORE_S: Final = 120.0  # the window before a fall that says what was normal
_GAP_S: Final = 15.0  # readings this close before the fall was seen may be of its way down: neither
_SETTLE_S: Final = 5.0  # nor readings just after it began (rates over an interval that spans it)

# the keys kept, in this order (a reading is a tuple of them; None where absent)
KEYS: Final = (
    k.PROCESS_CPU_CORES, k.PROCESS_BUSIEST_THREAD_RATIO, k.PROCESS_RUNQUEUE_WAIT_CORES, k.PROCESS_BLOCKED_THREADS,
    k.PROCESS_SLEEPING_RATIO, k.CONTAINER_CPU_USAGE_CORES, k.CONTAINER_CPU_LIMIT_CORES, k.CONTAINER_CPU_THROTTLED_RATIO,
    k.NODE_CPU_BUSY_RATIO, k.NODE_PRESSURE_CPU_WAITING_RATIO, k.NODE_PRESSURE_MEMORY_WAITING_RATIO,
    k.NODE_PRESSURE_IO_WAITING_RATIO,
    k.INFERENCE_REQUESTS_PER_SECOND, k.INFERENCE_QUEUE_SECONDS, k.INFERENCE_COMPUTE_SECONDS,
    k.INFERENCE_PENDING_REQUESTS, k.INFERENCE_RUNNING_REQUESTS, k.INFERENCE_TTFT_SECONDS, k.INFERENCE_KV_CACHE_RATIO,
    k.PCIE_RX_BYTES, k.SM_ACTIVE,
)
_I: Final = {key: i for i, key in enumerate(KEYS)}
_HOST: Final = frozenset(range(_I[k.PROCESS_CPU_CORES], _I[k.NODE_PRESSURE_IO_WAITING_RATIO] + 1))
_SERVER: Final = frozenset(range(_I[k.INFERENCE_REQUESTS_PER_SECOND], _I[k.INFERENCE_KV_CACHE_RATIO] + 1))
_EVIDENCE_KEYS: Final = frozenset(KEYS[i] for i in _HOST | _SERVER)
_SM: Final = _I[k.SM_ACTIVE]
AT_WORK: Final = IDLE  # SM activity from which the GPU was at work: its host figures say how it was fed
_TS: Final = itemgetter(0)

THROTTLED: Final = 0.25  # throttled in this share of the CFS periods: the limit bites
PRESSURE: Final = 0.2  # some task waited for a CPU this share of wall time: the node is contended
BUSY_THREAD: Final = 0.85  # a thread running (or runnable) this share of the time: it is the bottleneck
ASLEEP: Final = 0.6  # the feeding thread asleep this share of the time: it waits for something
DEMAND_FELL: Final = 0.6  # requests per second at or under this fraction of before: demand fell
_ROSE: Final = 0.15  # a share that rose this much over before changed with the fall
ALONE: Final = 0.85  # the busiest thread does this share of the process's CPU: it works alone
SHARED: Final = 0.6  # ... where before it did less than this share of it
QUIETER: Final = 0.85  # the process's threads awake this share of what they were, or less: it has less to do
QUIETER_CPU: Final = 0.9  # ... and its CPU this share of what it was, or less
_NOISE: Final = 0.05  # a share that moved less than this did not move


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the evidence says about a fall: ``cause`` is a short word for tests and the API
    (``demand``, ``queue``, ``throttled``, ``contention``, ``single_thread``, ``input``,
    ``none`` or ``no_evidence``); ``text`` names it with its numbers."""

    cause: str
    text: str
    since: float = 0.0  # the start of the fall it was weighed for
    asleep: bool = False  # (``input``) the feeding thread sleeps: it waits for its input, not a write
    io: bool = False  # (``input``) threads blocked on I/O, or the node's I/O pressure rose: storage is slow
    quieter: bool = False  # (``none``) the process ran less since the fall: awake less, on fewer cores

    @property
    def host_side(self) -> bool:
        """A cause on the host or in front of the GPU: evidence that capacity was lost."""
        return self.cause in ("queue", "throttled", "contention", "single_thread", "input")


@dataclass(slots=True)
class Evidence:
    """A GPU's host and server readings, one every ``EVERY`` seconds, for the last minutes."""

    readings: deque[tuple[float, tuple[float | None, ...]]] = field(default_factory=lambda: deque(maxlen=_KEEP))
    seen: bool = False  # whether any reading held host or server evidence (else: an agent without it)
    last_ts: float = -1e18  # when a record was last looked at
    served_ts: float = -1e18  # when a kept reading last held an inference server's figures

    def observe(self, ts: float, m: dict[str, float]) -> None:
        if ts - self.last_ts < EVERY:
            return
        self.last_ts = ts
        if not self.seen:
            # the common case of an agent without host evidence: one set intersection, no history
            if not (m.keys() & _EVIDENCE_KEYS):
                return
            self.seen = True
        reading = tuple(m.get(key) for key in KEYS)
        self.readings.append((ts, reading))
        if any(reading[i] is not None for i in _SERVER):
            self.served_ts = ts

    def serves(self) -> bool:
        """Whether an inference server's figures came for this GPU (it serves requests): in a reading
        still kept. Read from when the last such reading came rather than by scanning them all: the
        throughput detector asks this at each sample of a fall."""
        return bool(self.readings) and self.served_ts >= self.readings[0][0]

    def clear(self) -> None:
        self.readings.clear()
        self.seen = False
        self.last_ts = -1e18
        self.served_ts = -1e18

    def _mean(self, key: str, start: float, end: float, at_work: bool = False) -> float | None:
        # the readings are in time order: only those of the window are looked at (a fall is weighed
        # every few seconds, twenty keys at a time, over a window of a fifth of what is kept)
        i = _I[key]
        readings = self.readings
        lo = bisect_left(readings, start, key=_TS)
        hi = bisect_right(readings, end, lo, key=_TS)
        vals = [x for _, v in islice(readings, lo, hi) if (x := v[i]) is not None]
        if at_work and i in _HOST:
            working = [x for _, v in islice(readings, lo, hi)
                       if (x := v[i]) is not None and (sm := v[_SM]) is not None and sm >= AT_WORK]
            vals = working or vals
        return sum(vals) / len(vals) if vals else None

    def windows(self, key: str, since: float, ts: float) -> tuple[float | None, float | None]:
        """The mean of ``key`` in the minutes before ``since`` and in the time since it. Before, a host
        figure is read while the GPU was at work (where it was at all): how the job was fed, not how its
        process idled. A pretraining pod whose container ran at its CPU limit all the time (throttled
        in 30-55% of periods) paused for a checkpoint a minute before its evaluation, unthrottled while
        idle; against that minute its evaluation's usual throttling "rose", and the evaluation was
        reported on all 16 GPUs as a pod starved by its CPU limit (docs/benchmarks.md, round 26)."""
        return (self._mean(key, since - BEFORE_S, since - _GAP_S, at_work=True),
                self._mean(key, since + _SETTLE_S, ts))

    def weigh(self, since: float, ts: float, depth: float) -> Verdict:
        """The cause of a fall that began at ``since`` (judged at ``ts``; SM activity now at
        ``depth`` of its level), from what changed with it. Checked in this order: demand
        first (then it is no fault at all), then what is in front of the GPU, then the host."""
        if not self.seen:
            return Verdict("no_evidence", "no host or inference-server evidence from this GPU's agent", since)
        fell = f"while SM activity fell {(1.0 - depth) * 100:.0f}%"
        for check in (self._demand, self._queue, self._throttled, self._contention, self._single_thread, self._input):
            found = check(since, ts, fell)
            if found is not None:
                return Verdict(found.cause, found.text, since, found.asleep, found.io)
        return Verdict("none", "no host-side cause found: the process's CPU, its container's throttling and the "
                               "node's pressure did not change with the fall", since, quieter=self._quieter(since, ts))

    def _quieter(self, since: float, ts: float) -> bool:
        """Whether the process ran less since the fall than before it, with nothing it waits for:
        its threads awake ``QUIETER`` as much as before or less, and on ``QUIETER_CPU`` of its cores.

        Why: a server with fewer requests has less to do on its host too: it tokenizes, batches and
        schedules less, and its event loop sleeps waiting for the next request. A server that lost
        capacity while requests waited keeps its threads at work (they wait for a CPU: contention or
        throttling, weighed before this; or spin on a slower GPU). An independently written fleet's
        embedding and chat replicas whose share of the traffic fell (their loops awake 0.83 -> 0.40
        and 0.63 -> 0.52 of the time, their CPU 1.1 -> 0.6 and 0.85 -> 0.67 cores) read as "no cause"
        only because the loop's sleep stayed under ``ASLEEP``, which is about a job's loader."""
        s_before, s_now = self.windows(k.PROCESS_SLEEPING_RATIO, since, ts)
        c_before, c_now = self.windows(k.PROCESS_CPU_CORES, since, ts)
        if s_before is None or s_now is None or not c_before or c_now is None:
            return False
        awake_less = 1.0 - s_now <= QUIETER * (1.0 - s_before) and s_now >= s_before + _NOISE
        return awake_less and c_now <= QUIETER_CPU * c_before

    # ---- the causes, each None when its evidence is absent or unchanged ----
    def _demand(self, since: float, ts: float, fell: str) -> Verdict | None:
        before, now = self.windows(k.INFERENCE_REQUESTS_PER_SECOND, since, ts)
        if before is None or now is None or before <= 0 or now > DEMAND_FELL * before:
            return None
        q_before, q_now = self.windows(k.INFERENCE_QUEUE_SECONDS, since, ts)
        if q_before is not None and q_now is not None and q_now > 1.5 * q_before + 0.01:
            return None  # fewer completed while more waited: capacity, not demand
        return Verdict("demand", f"requests fell {(1.0 - now / before) * 100:.0f}% ({before:.1f} -> {now:.1f}/s) "
                                 f"and the queue did not grow: demand, not a fault")

    def _queue(self, since: float, ts: float, fell: str) -> Verdict | None:
        q_before, q_now = self.windows(k.INFERENCE_QUEUE_SECONDS, since, ts)
        p_before, p_now = self.windows(k.INFERENCE_PENDING_REQUESTS, since, ts)
        if q_before is not None and q_now is not None and q_now >= 2.0 * q_before + 0.05:
            return Verdict("queue", f"queue time grew from {q_before * 1000:.0f} to {q_now * 1000:.0f} ms {fell}: "
                                    f"the bottleneck is in front of the GPU")
        if p_before is not None and p_now is not None and p_now >= 2.0 * p_before + 2.0:
            return Verdict("queue", f"pending requests grew from {p_before:.0f} to {p_now:.0f} {fell}: "
                                    f"the bottleneck is in front of the GPU")
        return None

    def _throttled(self, since: float, ts: float, fell: str) -> Verdict | None:
        before, now = self.windows(k.CONTAINER_CPU_THROTTLED_RATIO, since, ts)
        if now is None or now < THROTTLED or (before is not None and now < before + _ROSE):
            return None
        limit = self._mean(k.CONTAINER_CPU_LIMIT_CORES, since, ts)
        of = f" (limit {limit:.3g} CPUs)" if limit else ""
        return Verdict("throttled", f"the container was CPU-throttled in {now * 100:.0f}% of periods{of} {fell}")

    def _contention(self, since: float, ts: float, fell: str) -> Verdict | None:
        before, now = self.windows(k.NODE_PRESSURE_CPU_WAITING_RATIO, since, ts)
        w_before, w_now = self.windows(k.PROCESS_RUNQUEUE_WAIT_CORES, since, ts)
        c_now = self.windows(k.PROCESS_CPU_CORES, since, ts)[1]
        # it waits for a CPU a good part of what it runs, and half as much again as before (on a busy
        # host some wait is normal)
        waits = w_now is not None and w_now >= 0.2 and (c_now is None or w_now >= 0.5 * c_now) \
            and (w_before is None or w_now >= 1.5 * w_before + 0.1)
        pressed = now is not None and now >= PRESSURE and (before is None or now >= before + _ROSE)
        if not waits and not (pressed and w_now is None):
            # the node's pressure is this process's only when it waits too: where its own wait is
            # read and did not rise, other work on the node waits, not the GPU's feeder
            return None
        parts = []
        if pressed and now is not None:
            parts.append(f"node CPU pressure rose to {now * 100:.0f}%"
                         + (f" (from {before * 100:.0f}%)" if before is not None else ""))
        if waits and w_now is not None:
            parts.append(f"the process waited for a CPU {w_now:.2f} core-seconds per second"
                         + (f" (from {w_before:.2f})" if w_before is not None else ""))
        busy = self.windows(k.NODE_CPU_BUSY_RATIO, since, ts)[1]
        if busy is not None:
            parts.append(f"node CPU {busy * 100:.0f}% busy")
        return Verdict("contention", f"{', '.join(parts)} {fell}: host CPU contention")

    def _single_thread(self, since: float, ts: float, fell: str) -> Verdict | None:
        """The process's CPU went to one thread at a full core, where before its other threads
        did most of it. Not "the busiest thread got busier": a PyTorch loop's main thread runs
        near a full core all the time (it launches and waits spinning; the real H200 trace g
        read 0.92 of a core in normal training, with 11 cores for the process, and 0.99 of 1.0
        when its input work fell to one thread). Shares, not cores, so it holds on any size of
        host."""
        b_before, busy = self.windows(k.PROCESS_BUSIEST_THREAD_RATIO, since, ts)
        c_before, c_now = self.windows(k.PROCESS_CPU_CORES, since, ts)
        asleep = self.windows(k.PROCESS_SLEEPING_RATIO, since, ts)[1]
        if busy is None or not c_now or busy < ALONE * c_now:
            return None
        # it never sleeps (running or waiting for a CPU: on a busy host a lone thread waits too)
        never_sleeps = asleep <= 1.0 - BUSY_THREAD if asleep is not None else busy >= BUSY_THREAD
        if not never_sleeps:
            return None
        if b_before is not None and c_before and b_before >= SHARED * c_before:
            return None  # most of its CPU was on one thread before too: that is how this process works
        was = f" (the process used {c_before:.1f} cores before)" if c_before is not None else ""
        return Verdict("single_thread", f"one thread of the process runs at {busy * 100:.0f}% of a core and the "
                                        f"others idle{was} {fell}: a single busy thread (a Python loop, the GIL) "
                                        f"feeds the GPU")

    def _input(self, since: float, ts: float, fell: str) -> Verdict | None:
        before, now = self.windows(k.PROCESS_SLEEPING_RATIO, since, ts)
        blocked = self.windows(k.PROCESS_BLOCKED_THREADS, since, ts)[1]
        asleep = now is not None and now >= ASLEEP and (before is None or now >= before + _ROSE)
        if not asleep and not (blocked is not None and blocked >= 1.0):
            return None
        io_before, io_now = self.windows(k.NODE_PRESSURE_IO_WAITING_RATIO, since, ts)
        io = (blocked is not None and blocked >= 1.0) or (
            io_now is not None and io_now >= PRESSURE and (io_before is None or io_now >= io_before + _ROSE))
        parts = [f"the process sleeps {now * 100:.0f}% of the time" if asleep and now is not None
                 else f"{blocked:.0f} threads of the process blocked on I/O"]
        rx_before, rx_now = self.windows(k.PCIE_RX_BYTES, since, ts)
        if rx_before and rx_now is not None and rx_now < 0.5 * rx_before:
            parts.append(f"PCIe receive fell {(1.0 - rx_now / rx_before) * 100:.0f}%")
        return Verdict("input", f"{' and '.join(parts)} {fell}: waiting on input", asleep=asleep, io=io)
