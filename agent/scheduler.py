"""Cost-aware, adaptive sampling schedule: pure logic on injected clocks.

Three parts, each testable with fake time:

* :class:`AdaptiveInterval` moves one GPU's interval between a floor (250 ms) and a
  ceiling (10 s): straight to the floor when its processes change or its values jump,
  to the busy interval when it works, and stretching towards the ceiling while it is
  idle and stable. An idle fleet then costs a tenth of a busy one.
* :class:`CpuBudget` keeps the agent's sampling under a CPU budget (1% of one core by
  default), measured on the CPU clocks of the agent's own sampling and XID threads (not
  the process: in ``gpuwatch up`` the process also serves the API). Feed-forward: from
  the measured CPU cost of one GPU-sample it computes the shortest interval the fleet can
  afford. Feedback: if those threads still go over (the XID thread, GC, calls that turned
  slow), it stretches every interval until they are back under. The caller never lets a
  stretched interval pass the ceiling: every GPU is sampled at least that often.
* :class:`CpuPacer` is the transport's budget: a bucket of CPU seconds that the sender's
  discretionary work (replaying the spool, reconnecting) waits on when the transport's
  threads ran over, so an outage costs the transport's budget and never the sampler's.
* :func:`slow_periods` gives calls whose measured latency is high (the energy counter
  took ~4 ms on an H200) their own, longer period, so they cost a fixed small share.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from telemetry.catalog import BY_KEY
from telemetry.keys import (
    FB_FREE,
    FB_USED,
    GPU_UTIL,
    MEM_COPY_UTIL,
    POWER_MGMT_LIMIT,
    POWER_USAGE,
    SM_ACTIVE,
    XID_ERRORS,
)

VOLATILE = 0.15  # a change of 15% of a metric's range counts as a jump
BUSY = 0.05  # at work from 5% of SM activity or of GPU utilisation


def _full_scale(key: str) -> float:
    scale = BY_KEY[key].full_scale
    if scale is None:
        raise ValueError(f"{key} is not a share (percent or ratio)")
    return scale


#: the shares whose moves count, with their full scales (resolved once: a hot path)
_SHARES: Final = tuple((key, _full_scale(key)) for key in (GPU_UTIL, SM_ACTIVE, MEM_COPY_UTIL))
_BUSY_SM: Final = BUSY * _full_scale(SM_ACTIVE)
_BUSY_UTIL: Final = BUSY * _full_scale(GPU_UTIL)


@dataclass(slots=True)
class AdaptiveInterval:
    floor: float = 0.25
    ceiling: float = 10.0
    busy: float = 1.0
    value: float = 1.0

    def __post_init__(self) -> None:
        self.busy = min(max(self.busy, self.floor), self.ceiling)
        self.value = self.busy

    def update(self, busy: bool, volatility: float, processes_changed: bool) -> float:
        if processes_changed or volatility >= VOLATILE:
            self.value = self.floor
        elif busy:
            # relax from a burst back up to the busy interval, or drop to it from idle
            self.value = min(self.busy, self.value * 1.5) if self.value < self.busy else self.busy
        elif volatility >= VOLATILE / 3:
            self.value = max(self.floor, self.value / 2)
        else:
            self.value = min(self.ceiling, self.value * 1.5)
        return self.value


def volatility(prev: Mapping[str, float] | None, cur: Mapping[str, float]) -> float:
    """How much a GPU's state moved between two samples, as a fraction of each metric's range."""
    if prev is None:
        return 1.0
    score = 0.0
    for key, scale in _SHARES:
        a, b = prev.get(key), cur.get(key)
        if a is not None and b is not None:
            score = max(score, abs(b - a) / scale)
    power, prev_power = cur.get(POWER_USAGE), prev.get(POWER_USAGE)
    limit = cur.get(POWER_MGMT_LIMIT) or 0.0
    if power is not None and prev_power is not None and limit > 0:
        score = max(score, abs(power - prev_power) / limit)
    used, prev_used = cur.get(FB_USED), prev.get(FB_USED)
    free = cur.get(FB_FREE)
    if used is not None and prev_used is not None and free is not None and used + free > 0:
        score = max(score, 4.0 * abs(used - prev_used) / (used + free))
    if cur.get(XID_ERRORS) != prev.get(XID_ERRORS):
        score = 1.0
    return score


def is_busy(metrics: Mapping[str, float]) -> bool:
    """At work: SM activity, or the share of time a kernel is resident (GPU utilisation). Either
    counts: a launch-bound loop of tiny kernels reads 20% utilisation with SM activity near zero
    (the real H200 trace l, 600 kernels per sync), and sampled as idle, every 10 s, its minute
    of launch-bound work held too few samples to be reported."""
    sm = metrics.get(SM_ACTIVE)
    return (sm is not None and sm >= _BUSY_SM) or metrics.get(GPU_UTIL, 0.0) >= _BUSY_UTIL


def slow_periods(latency_s: Mapping[str, float], threshold_s: float, duty: float) -> dict[str, float]:
    """Period for each call slower than the threshold: its latency may use ``duty`` of a core.

    With duty 0.001 (a tenth of the default budget), the 4 ms energy counter runs every 4 s.
    """
    return {
        source: min(60.0, max(1.0, latency / duty))
        for source, latency in latency_s.items()
        if latency >= threshold_s
    }


@dataclass(slots=True)
class CpuBudget:
    """Keeps the CPU use read from ``cpu_clock`` (the agent's sampling threads) under ``fraction`` of one core."""

    fraction: float = 0.01
    window_s: float = 10.0
    cpu_clock: Callable[[], float] = time.thread_time
    wall_clock: Callable[[], float] = time.monotonic
    headroom: float = 0.8
    cost_per_sample: float = 0.0
    stretch: float = 1.0
    _points: deque[tuple[float, float]] = field(default_factory=deque)

    def record_sample(self, cpu_seconds: float) -> None:
        """Feed the CPU cost of one GPU-sample (an EWMA tracks it)."""
        if self.cost_per_sample == 0.0:
            self.cost_per_sample = cpu_seconds
        else:
            self.cost_per_sample += 0.05 * (cpu_seconds - self.cost_per_sample)

    def min_interval(self, gpus: int) -> float:
        """Shortest per-GPU interval the budget affords, before feedback stretch."""
        if gpus == 0 or self.cost_per_sample == 0.0:
            return 0.0
        return gpus * self.cost_per_sample / (self.fraction * self.headroom)

    def usage(self) -> float:
        """CPU fraction of one core over the window, as ``cpu_clock`` measures it."""
        if len(self._points) < 2:
            return 0.0
        (w0, c0), (w1, c1) = self._points[0], self._points[-1]
        return (c1 - c0) / (w1 - w0) if w1 > w0 else 0.0

    def observe(self) -> float:
        """Take a CPU-time reading; adjust and return the feedback stretch."""
        wall, cpu = self.wall_clock(), self.cpu_clock()
        self._points.append((wall, cpu))
        while len(self._points) > 2 and wall - self._points[1][0] >= self.window_s:
            self._points.popleft()
        if wall - self._points[0][0] >= self.window_s / 2:
            use = self.usage()
            if use > self.fraction:
                self.stretch = min(100.0, self.stretch * max(1.25, use / self.fraction))
            elif use < 0.6 * self.fraction:
                self.stretch = max(1.0, self.stretch / 1.1)
        return self.stretch


@dataclass(slots=True)
class CpuPacer:
    """A bucket of CPU seconds refilled at ``fraction`` of a core, holding at most ``burst_s`` worth.

    Work is measured after the fact on ``cpu_clock`` (the transport's threads); when the
    bucket is empty, :meth:`delay` says how long discretionary work should wait for it to
    refill. Work that cannot wait (sending what is sampled now) is never delayed, only
    counted, so it may leave the bucket empty for the rest.
    """

    fraction: float
    cpu_clock: Callable[[], float]
    wall_clock: Callable[[], float] = time.monotonic
    burst_s: float = 30.0
    max_delay_s: float = 10.0
    waited_s: float = 0.0
    _tokens: float | None = None  # None until the first reading: the bucket starts full
    _wall: float = 0.0
    _cpu: float = 0.0

    def delay(self) -> float:
        """Seconds the next discretionary piece of work should wait (0 while within budget)."""
        wall, cpu = self.wall_clock(), self.cpu_clock()
        cap = self.fraction * self.burst_s
        if self._tokens is None:
            self._tokens = cap
        else:
            self._tokens = min(cap, self._tokens + (wall - self._wall) * self.fraction - (cpu - self._cpu))
        # the debt is capped at one longest wait: the work that may not wait (spooling what is sampled
        # during an outage) can run the bucket far below zero, and a debt of minutes would then hold
        # the reconnect and the replay back for minutes after the broker is back
        self._tokens = max(self._tokens, -self.fraction * self.max_delay_s)
        self._wall, self._cpu = wall, cpu
        if self._tokens >= 0:
            return 0.0
        return min(self.max_delay_s, -self._tokens / self.fraction)

    def waited(self, seconds: float) -> None:
        """Count time spent waiting on the bucket (for /metrics)."""
        self.waited_s += seconds


@dataclass(order=True, slots=True)
class _Due:
    at: float
    key: str = field(compare=False)


class DueQueue:
    """The next due time of each GPU, earliest first."""

    def __init__(self) -> None:
        self._heap: list[_Due] = []
        self._at: dict[str, float] = {}

    def put(self, key: str, at: float) -> None:
        self._at[key] = at
        heapq.heappush(self._heap, _Due(at, key))

    def discard(self, key: str) -> None:
        self._at.pop(key, None)

    def peek(self) -> float | None:
        while self._heap and self._at.get(self._heap[0].key) != self._heap[0].at:
            heapq.heappop(self._heap)  # superseded or discarded entry
        return self._heap[0].at if self._heap else None

    def pop_due(self, now: float) -> list[str]:
        out: list[str] = []
        while (at := self.peek()) is not None and at <= now:
            key = heapq.heappop(self._heap).key
            del self._at[key]
            out.append(key)
        return out

    def __len__(self) -> int:
        return len(self._at)
