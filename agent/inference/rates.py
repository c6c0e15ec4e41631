"""One scrape's series by name, and what two scrapes of one server say over the time between them.

Why a module: Triton and vLLM both report cumulative counters per model (or per engine,
per finish reason), and a figure is their increase over the interval between the agent's
two scrapes, summed over the series. Three rules, Prometheus' own, are kept here once:

* a counter that went down was reset (the server restarted): its increase is its value now;
* a series that the previous scrape did not have (a model just loaded, vLLM's first request
  that ended for a new reason) started from zero within the interval: its increase is its value;
* without a previous scrape there is no interval: no rate, no mean (absent, never 0).

NaN and infinite values are ignored, so a figure is always a finite number or absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from agent.inference.parse import Labels, Sample


@dataclass(frozen=True, slots=True)
class Scrape:
    """One successful scrape of one server: when, and each wanted series' value by name and labels."""

    ts: float
    series: dict[str, dict[Labels, float]]

    @classmethod
    def of(cls, ts: float, samples: Iterable[Sample]) -> Scrape:
        series: dict[str, dict[Labels, float]] = {}
        for s in samples:
            if math.isfinite(s.value):
                series.setdefault(s.name, {})[s.labels] = s.value
        return cls(ts, series)

    def has(self, name: str) -> bool:
        return name in self.series

    def total(self, name: str) -> float | None:
        """The sum over the series of a gauge; None when the server does not report it."""
        values = self.series.get(name)
        return sum(values.values()) if values else None

    def mean(self, name: str) -> float | None:
        """The mean over the series of a gauge (a share reported per engine); None when absent."""
        values = self.series.get(name)
        return sum(values.values()) / len(values) if values else None


def increase(prev: Scrape, cur: Scrape, name: str) -> float | None:
    """How much counter ``name`` grew from ``prev`` to ``cur``, summed over its series, resets
    counted as above; None when ``cur`` does not report it."""
    now = cur.series.get(name)
    if now is None:
        return None
    before = prev.series.get(name, {})
    total = 0.0
    for labels, value in now.items():
        old = before.get(labels, 0.0)
        total += value - old if value >= old else value
    return total


def rate(prev: Scrape, cur: Scrape, name: str) -> float | None:
    """Increase of ``name`` per second of the interval; None without one."""
    dt = cur.ts - prev.ts
    grew = increase(prev, cur, name)
    return None if grew is None or dt <= 0 else grew / dt


def ratio(prev: Scrape, cur: Scrape, total: str, count: str, scale: float = 1.0,
          less: str | None = None) -> float | None:
    """Mean per event over the interval: increase of ``total`` over increase of ``count`` (less the
    increase of ``less`` where given), times ``scale``; None when no event happened in it."""
    grew, events = increase(prev, cur, total), increase(prev, cur, count)
    if grew is None or events is None:
        return None
    if less is not None:
        events -= increase(prev, cur, less) or 0.0
    return grew / events * scale if events > 0 else None
