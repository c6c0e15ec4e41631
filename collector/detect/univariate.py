"""A general-purpose streaming anomaly score for one numeric series (benchmarked on NAB).

Why it exists beside the GPU detectors: those know what a metric means; this one knows
nothing, and is what judges a series no specific detector covers. It follows the idea
that made CAD OSE strong on NAB: an anomaly is a *context* the series has never been in.

* **novelty**: the value lies outside the range seen so far (scored by how far);
* **context**: the value's quantile bin, the pair of the last two bins, or the triple of
  the last three, was never seen before. A never-seen value bin weighs most, a never-seen
  triple least. Each weight is discounted by how often new contexts of that length have
  been appearing lately (an exponentially weighted rate), so a noisy series that keeps
  producing new contexts is not alarming, while a regular one that suddenly does is.

The score is the larger of the two, in [0, 1]. An anomaly is an onset: a score is
reported only when it exceeds everything of the last ``refractory`` steps (0 otherwise),
so one incident gives one detection (``raw`` keeps the score before that gating, for callers
that gate onsets their own way). The windowed-Gaussian surprise and relative-entropy
parts we also tried lowered the NAB score (docs/benchmarks.md), so they are not here.
"""

from __future__ import annotations

import math
from collections import deque


class UnivariateDetector:
    """Feed values in order with :meth:`update`; ``input_min``/``input_max`` scale the bins
    (NAB hands every detector these), ``probation`` is how many values to learn from first."""

    def __init__(self, input_min: float, input_max: float, probation: int, *, bins: int = 24,
                 ctx_weights: tuple[float, ...] = (0.9, 0.75, 0.6), rarity_power: float = 4.0,
                 refractory: int | None = None) -> None:
        span = input_max - input_min
        self.lo = input_min
        self.scale = 1.0 / span if span > 0 else 1.0
        self.probation = probation
        self.refractory = refractory if refractory is not None else max(10, probation // 3)
        self.bins = bins
        self.ctx_weights = ctx_weights
        self.rarity_power = rarity_power
        self.alpha = 2.0 / (max(probation, 20) + 1)
        self.n = 0
        self.seen_min = math.inf
        self.seen_max = -math.inf
        self.recent: deque[int] = deque(maxlen=len(ctx_weights))
        self.tables: list[dict[tuple[int, ...], int]] = [{} for _ in ctx_weights]
        self.new_rate = [0.0 for _ in ctx_weights]
        self.past: deque[float] = deque(maxlen=self.refractory)
        self.raw = 0.0  # the last value's score before onset gating (0 during probation)

    def update(self, value: float) -> float:
        """The anomaly score of this value, in [0, 1] (0 during probation and between onsets)."""
        x = (value - self.lo) * self.scale
        score = 0.0
        if self.n >= self.probation // 2 and self.seen_max >= self.seen_min:
            rng = max(self.seen_max - self.seen_min, 1e-6)
            beyond = max(x - self.seen_max, self.seen_min - x, 0.0) / rng
            if beyond > 0:
                score = min(1.0, 0.5 + 5.0 * beyond)
        self.recent.append(min(self.bins - 1, max(0, int(x * self.bins))))
        recent = tuple(self.recent)
        ctx = 0.0
        for length, (weight, table) in enumerate(zip(self.ctx_weights, self.tables, strict=True), start=1):
            if len(recent) < length:
                break
            key = recent[-length:]
            seen = table.get(key, 0)
            rate = self.new_rate[length - 1]
            if seen == 0 and ctx == 0.0:
                ctx = weight * (1.0 - rate) ** self.rarity_power
            self.new_rate[length - 1] = rate + self.alpha * ((1.0 if seen == 0 else 0.0) - rate)
            table[key] = seen + 1
        if self.n >= self.probation:
            score = max(score, ctx)
        self.seen_min, self.seen_max = min(self.seen_min, x), max(self.seen_max, x)
        self.n += 1
        self.raw = score if self.n > self.probation else 0.0
        onset = score if (not self.past or score > max(self.past)) else 0.0
        self.past.append(score)
        return onset if self.n > self.probation else 0.0
