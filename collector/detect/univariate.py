"""A general-purpose streaming anomaly score for one numeric series (benchmarked on NAB).

Why it exists beside the GPU detectors: those know what a metric means; this one knows
nothing, and is what judges a series no specific detector covers. It follows the idea
that made CAD OSE strong on NAB: an anomaly is a *context* the series has never been in.

* **novelty**: the value lies outside the range seen so far (scored by how far);
* **context**: the value's quantile bin, the pair of the last two bins, or the triple of
  the last three, was never seen before. A never-seen value bin weighs most, a never-seen
  triple least. Each weight is discounted twice: by how often new contexts of that length
  have been appearing lately (an exponentially weighted rate), so a noisy series that
  keeps producing new contexts is not alarming while a regular one that suddenly does is;
  and by how well its prefix is known (the escape estimate ``c / (c + t + 1)`` of a
  prefix seen ``c`` times with ``t`` distinct successors), so a new successor of a bin
  seen a thousand times with two successors is news, one of a bin seen twice is not;
* **slow contexts**: the same context model over the means of consecutive blocks of
  ``blocks`` values (8 and 32 by default): a level that settles where it never stayed,
  or a rhythm that changes (a daily peak that flattens), is a never-seen *block* context
  although every single value and every pair of values was seen before;
* a never-seen bin that only *extends* its stream's range (the values', or a block
  stream's means') weighs no more than the range novelty of that stream (below): the
  extremes of a noisy series, and more so of its block means, creep outward as it goes
  on, and whether a creep crosses a bin line is an accident of the grid; how far beyond
  the range it goes is not. A never-seen bin inside the range keeps its weight.

The score is the largest of these, in [0, 1]. An anomaly is an onset: a score is
reported only when it exceeds everything of the last ``refractory`` steps (0 otherwise),
so one incident gives one detection (``raw`` keeps the score before that gating, for callers
that gate onsets their own way). The onset rule compares the novelty before its cap at 1,
so an excursion well beyond an earlier one (a larger spike after a spike) is an onset of
its own rather than a tie with it. Memory per series is the fixed context tables (at most
``bins`` cubed keys per model) plus a few numbers; an update costs a few dictionary
look-ups. What was tried and dropped is in docs/benchmarks.md (NAB).
"""

from __future__ import annotations

import math
from collections import deque


class _Contexts:
    """Never-seen contexts of one stream of bin ids: the last 1, 2, ... bins."""

    __slots__ = ("alpha", "distinct", "escape_power", "rarity_power", "rate", "recent", "tables", "total", "weights")

    def __init__(self, weights: tuple[float, ...], alpha: float, rarity_power: float, escape_power: float) -> None:
        self.weights = weights
        self.alpha = alpha
        self.rarity_power = rarity_power
        self.escape_power = escape_power
        self.recent: deque[int] = deque(maxlen=len(weights))
        self.tables: list[dict[tuple[int, ...], int]] = [{} for _ in weights]  # context -> times seen
        self.distinct: list[dict[tuple[int, ...], int]] = [{} for _ in weights]  # prefix -> distinct successors
        self.rate = [0.0 for _ in weights]
        self.total = 0

    def step(self, b: int, cap: float = 1.0) -> float:
        """Fold bin ``b`` in; the weight of the shortest never-seen context it ends (0 if none).
        ``cap`` bounds the weight of a never-seen single bin (the caller's range novelty)."""
        self.recent.append(b)
        recent = tuple(self.recent)
        score = 0.0
        for length in range(1, len(recent) + 1):
            table = self.tables[length - 1]
            key = recent[-length:]
            seen = table.get(key, 0)
            rate = self.rate[length - 1]
            if seen == 0:
                prefix = key[:-1]
                successors = self.distinct[length - 1]
                t = successors.get(prefix, 0)
                if score == 0.0:
                    c = self.tables[length - 2].get(prefix, 0) if length > 1 else self.total
                    escape = c / (c + t + 1.0)
                    score = self.weights[length - 1] * (1.0 - rate) ** self.rarity_power * escape ** self.escape_power
                    if length == 1 and cap < score:
                        score = cap
                successors[prefix] = t + 1
            self.rate[length - 1] = rate + self.alpha * ((1.0 if seen == 0 else 0.0) - rate)
            table[key] = seen + 1
        self.total += 1
        return score


class _Blocks:
    """The context model over the means of consecutive blocks of ``size`` values."""

    __slots__ = ("ctx", "hi", "lo", "n", "size", "total")

    def __init__(self, size: int, ctx: _Contexts) -> None:
        self.size = size
        self.ctx = ctx
        self.total = 0.0
        self.n = 0
        self.lo = math.inf  # the range of the block means so far
        self.hi = -math.inf


def _novelty(x: float, lo: float, hi: float) -> float:
    """How far ``x`` lies beyond [lo, hi] as a score, 0.5 + 5 * (distance / range), not capped;
    0 inside the range or before there is one."""
    if hi < lo or lo <= x <= hi:
        return 0.0
    return 0.5 + 5.0 * (max(x - hi, lo - x) / max(hi - lo, 1e-6))


class UnivariateDetector:
    """Feed values in order with :meth:`update`; ``input_min``/``input_max`` scale the bins
    (NAB hands every detector these), ``probation`` is how many values to learn from first."""

    __slots__ = ("bins", "blocks", "ctx", "lo", "n", "past", "probation", "raw", "refractory", "scale", "seen_max",
                 "seen_min")

    def __init__(self, input_min: float, input_max: float, probation: int, *, bins: int = 24,
                 ctx_weights: tuple[float, ...] = (0.9, 0.75, 0.6), rarity_power: float = 4.0,
                 escape_power: float = 0.25, blocks: tuple[int, ...] = (8, 32),
                 refractory: int | None = None) -> None:
        span = input_max - input_min
        self.lo = input_min
        self.scale = 1.0 / span if span > 0 else 1.0
        self.probation = probation
        self.refractory = refractory if refractory is not None else max(10, probation // 3)
        self.bins = bins
        self.ctx = _Contexts(ctx_weights, 2.0 / (max(probation, 20) + 1), rarity_power, escape_power)
        self.blocks = [_Blocks(k, _Contexts(ctx_weights, 2.0 / (max(probation // k, 10) + 1), rarity_power,
                                            escape_power)) for k in blocks]
        self.n = 0
        self.seen_min = math.inf
        self.seen_max = -math.inf
        self.past: deque[tuple[int, float]] = deque()  # (step, score), scores decreasing: the window's maximum first
        self.raw = 0.0  # the last value's score before onset gating (0 during probation)

    def novelty(self, value: float) -> float:
        """How far ``value`` lies beyond every value seen so far, scored as :meth:`update` would
        score it (capped at 1), without folding it in: a caller may ask of a value between its
        regular steps (the general detector, of a sliding minute) at no cost to the series."""
        if self.n <= self.probation:
            return 0.0
        return min(1.0, _novelty((value - self.lo) * self.scale, self.seen_min, self.seen_max))

    def _bin(self, x: float) -> int:
        return min(self.bins - 1, max(0, int(x * self.bins)))

    def update(self, value: float) -> float:
        """The anomaly score of this value, in [0, 1] (0 during probation and between onsets)."""
        x = (value - self.lo) * self.scale
        novelty = _novelty(x, self.seen_min, self.seen_max)
        score = novelty if self.n >= self.probation // 2 else 0.0  # not capped at 1 here: the onset rule sees it whole
        ctx = self.ctx.step(self._bin(x), novelty if novelty > 0 else 1.0)
        for blk in self.blocks:
            blk.total += x
            blk.n += 1
            if blk.n == blk.size:
                m = blk.total / blk.size
                beyond = _novelty(m, blk.lo, blk.hi)
                ctx = max(ctx, blk.ctx.step(self._bin(m), beyond if beyond > 0 else 1.0))
                blk.lo, blk.hi = min(blk.lo, m), max(blk.hi, m)
                blk.total, blk.n = 0.0, 0
        if self.n >= self.probation:
            score = max(score, ctx)
        self.seen_min, self.seen_max = min(self.seen_min, x), max(self.seen_max, x)
        past = self.past
        onset = min(1.0, score) if (not past or score > past[0][1]) else 0.0
        while past and past[-1][1] <= score:
            past.pop()
        past.append((self.n, score))
        if past[0][0] <= self.n - self.refractory:
            past.popleft()
        self.n += 1
        self.raw = min(1.0, score) if self.n > self.probation else 0.0
        return onset if self.n > self.probation else 0.0
