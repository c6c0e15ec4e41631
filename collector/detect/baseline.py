"""A robust streaming baseline: a level and a spread per series (clock and temperature).

Why not a mean and a standard deviation: one spike would move them for an hour. Each
sample is first clipped to ``level ± k·spread`` and only then folded into exponentially
weighted level and mean-absolute-deviation estimates, so outliers pull the baseline at
most a little (a Huber-style M-estimate). The weight of a sample depends on the time
since the previous one (``1 - exp(-dt/tau)``), so irregular sampling intervals do not
change the baseline's memory, and time comes from the records.
"""

from __future__ import annotations

import math


class RobustBaseline:
    """Exponentially weighted, outlier-clipped level and spread of one series."""

    __slots__ = ("clip", "count", "last_ts", "level", "spread", "tau")

    def __init__(self, tau: float, clip: float = 3.0) -> None:
        self.tau = tau
        self.clip = clip
        self.level = 0.0
        self.spread = 0.0
        self.count = 0
        self.last_ts = 0.0

    def update(self, ts: float, value: float) -> None:
        if self.count == 0:
            self.level, self.count, self.last_ts = value, 1, ts
            return
        dt = ts - self.last_ts
        self.last_ts = ts
        # early on, weigh samples like a running mean; later like an EWMA of memory tau
        a = max(1.0 / (self.count + 1), 1.0 - math.exp(-dt / self.tau) if dt > 0 else 0.0)
        self.count += 1
        level, spread = self.level, self.spread
        bound = self.clip * spread if spread > 0 else abs(value - level)
        dev = value - level
        if dev > bound:
            dev = bound
        elif dev < -bound:
            dev = -bound
        self.level = level + a * dev
        self.spread = spread + a * (abs(dev) - spread)
