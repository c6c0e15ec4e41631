"""Robust streaming baselines: a level and a spread per series, with seasonality.

Why not a mean and a standard deviation: one spike would move them for an hour. Each
sample is first clipped to ``level ± k·spread`` and only then folded into exponentially
weighted level and mean-absolute-deviation estimates, so outliers pull the baseline at
most a little (a Huber-style M-estimate). The weight of a sample depends on the time
since the previous one (``1 - exp(-dt/tau)``), so irregular sampling intervals do not
change the baseline's memory, and time comes from the records.

Seasonality: :class:`SeasonalBaseline` keeps one baseline per hour of day and per hour of
week beside the global one. A seasonal bucket is used once it has seen enough samples on
at least two different days (weeks), so a series that is busy every weekday at 9:00 is
judged against 9:00 on other days, not against last night.
"""

from __future__ import annotations

import math

_BUCKET_EVERY = 10.0

class RobustBaseline:
    """Exponentially weighted, outlier-clipped level and spread of one series."""

    __slots__ = ("clip", "count", "last_ts", "level", "max_dt", "spread", "tau")

    def __init__(self, tau: float, clip: float = 3.0, max_dt: float = math.inf) -> None:
        self.tau = tau
        self.max_dt = max_dt  # seasonal buckets see one hour a day: gaps between days must not erase them
        self.clip = clip
        self.level = 0.0
        self.spread = 0.0
        self.count = 0
        self.last_ts = 0.0

    def update(self, ts: float, value: float) -> None:
        if self.count == 0:
            self.level, self.count, self.last_ts = value, 1, ts
            return
        dt = min(ts - self.last_ts, self.max_dt)
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

    def reset(self) -> None:
        self.level = self.spread = 0.0
        self.count = 0

    def zscore(self, value: float, floor: float) -> float:
        """How many spreads ``value`` lies from the level (spread floored, so flat series work)."""
        return (value - self.level) / max(self.spread, floor)


class SeasonalBaseline:
    """A global baseline plus hour-of-day and hour-of-week ones used once they have history."""

    __slots__ = ("bucket_ts", "daily", "days_seen", "global_", "min_samples", "weekly", "weeks_seen")

    def __init__(self, tau: float, min_samples: int = 60) -> None:
        self.global_ = RobustBaseline(tau)
        self.daily = [RobustBaseline(tau, max_dt=_BUCKET_EVERY) for _ in range(24)]
        self.weekly = [RobustBaseline(tau, max_dt=_BUCKET_EVERY) for _ in range(168)]
        self.days_seen: list[set[int]] = [set() for _ in range(24)]
        self.weeks_seen: list[set[int]] = [set() for _ in range(168)]
        self.min_samples = min_samples
        self.bucket_ts = -1e18

    def update(self, ts: float, value: float) -> None:
        self.global_.update(ts, value)
        if ts - self.bucket_ts < _BUCKET_EVERY:
            return  # seasonal buckets learn from one sample in ten seconds: plenty, and cheap
        self.bucket_ts = ts
        hour = int(ts // 3600)
        h_day, h_week = hour % 24, (hour + 72) % 168  # epoch day 0 was a Thursday: index 0 = Monday 00:00
        if len(self.days_seen[h_day]) < 3:
            self.days_seen[h_day].add(hour // 24)
        if len(self.weeks_seen[h_week]) < 3:
            self.weeks_seen[h_week].add(hour // 168)
        self.daily[h_day].update(ts, value)
        self.weekly[h_week].update(ts, value)

    def current(self, ts: float) -> RobustBaseline:
        """The most specific baseline with enough history for the hour of ``ts``."""
        hour = int(ts // 3600)
        h_week = (hour + 72) % 168
        if len(self.weeks_seen[h_week]) >= 2 and self.weekly[h_week].count >= self.min_samples:
            return self.weekly[h_week]
        h_day = hour % 24
        if len(self.days_seen[h_day]) >= 2 and self.daily[h_day].count >= self.min_samples:
            return self.daily[h_day]
        return self.global_
