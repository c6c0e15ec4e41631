"""The working level of one workload's SM activity, and what kind of workload it is.

Why not a mean and a spread: a mean seeded by a process's first samples starts from its
start-up (a new CUDA process read 0.25 for two samples, then ran at 0.97: GPU-FACTS.md),
and a spread that learns every evaluation pause and checkpoint grows until no fall can
pass "three spreads below". What a fall is judged against here is the level the
workload *works* at:

* the first ``WARMUP_S`` seconds of a process are never learned;
* samples are folded into 10-second blocks; blocks of an idle GPU (below ``IDLE``) are not
  part of a working level, nor are blocks while a fall is being judged (an incident must
  not become the new normal);
* the level is a high quantile (the 90th percentile) of the last 30 minutes of blocks, so
  dips that take less than a tenth of the time (evaluation, checkpoints, load troughs)
  and a slow start never become the level; the spread is that of the *plateau* blocks
  only (within 15% of the level), so dips never widen it;
* the level counts as established once the workload has worked at it for ``ESTABLISH_S``.

What kind of workload (the rule, from behaviour only), once it has worked for 10 minutes
since it first reached its plateau (a start-up of minutes says nothing, and a serving
load can look flat for a few): a *steady* workload (training, batch) spends at least 70%
of its time on the plateau, leaves it only in discrete dips, and its plateau is tight
(blocks within about 3% of each other: a job's step time is regular); a *demand-driven*
one (serving) moves with its traffic, so it is either off its plateau much of the time
or spread across it. Names of pods and services are not used: they are conventions, not
facts. Before the verdict (``steady is None``) ``tight`` says whether the same rule has
held for a minute, and the caller adds a prior (a GPU with other replicas in its service
is not yet known to be steady). A job whose activity is noisy at its plateau is judged
as demand-driven: only steps count for it. A serving replica saturated and flat for ten
minutes is judged as steady, unless it was seen moving with demand before (the verdict
"demand-driven" is kept for the process's life).

A *phase change* of the process (it allocated or freed a lot of memory at once: a
different model, batch or task, like a trainer that starts serving) starts the level
afresh: a different job in the same process is not a slower version of the old one,
while an input stall or a slower step keeps the memory it had.

``fast`` is an exponentially weighted mean over about ``FAST_TAU`` seconds, weighted by
the time between samples, so sampling intervals do not change its memory.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

BLOCK_S = 10.0
WINDOW_BLOCKS = 180  # 30 minutes of blocks
WARMUP_S = 20.0
ESTABLISH_S = 45.0
IDLE = 0.05  # below this SM activity the GPU idles: not a working level
FAST_TAU = 5.0
PLATEAU = 0.85  # a block within 15% of the level is on the plateau
STEADY_FRACTION = 0.7
CLASSIFY_BLOCKS = 60  # 10 minutes
EARLY_BLOCKS = 6  # a minute
TIGHT = 0.03
PHASE_MIB = 2048.0
PHASE_FRACTION = 0.15
DIP_MIN_S = 20.0  # shorter falls are transitions, not dips to learn
ANCHOR_FROM, ANCHOR_TO = 120.0, 20.0  # the step anchor: blocks that ended this long ago


def _line(pts: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Least-squares line ``y = a + b·x`` through at least 6 points, and its residuals' IQR."""
    n = len(pts)
    if n < 6:
        return None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    res = sorted(y - a - b * x for x, y in pts)
    return a, b, res[(3 * n) // 4] - res[n // 4]


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


class ActivityLevel:
    """SM activity of one process set on one GPU; feed every sample with :meth:`update`."""

    __slots__ = ("_anchor", "_anchor_ts", "b_fb", "b_fb_n", "b_n", "b_start", "b_sum", "blocks", "dips",
                 "ep_mode", "ep_n", "ep_ref", "ep_start", "ep_sum", "fast", "fast_ts", "fb_level", "level",
                 "means", "phase_ts", "plateau_blocks", "recent", "recent_max", "since", "spread", "steady", "tight")

    def __init__(self, since: float) -> None:
        self.since = since
        self.fast = -1.0
        self.fast_ts = since
        self.b_start = since + WARMUP_S
        self.b_sum = 0.0
        self.b_n = 0
        self.b_fb = 0.0
        self.b_fb_n = 0
        self.blocks: deque[tuple[float, float]] = deque(maxlen=WINDOW_BLOCKS)  # (mean SM, mean FB MiB)
        self.means: deque[float] = deque(maxlen=WINDOW_BLOCKS)  # the same means, for sorting
        self.recent: deque[tuple[float, float]] = deque(maxlen=16)  # (end ts, mean SM) of every block
        self.recent_max = 0.0  # the highest of them
        self.level = 0.0
        self.spread = 0.0
        self.plateau_blocks = 0
        self.fb_level = -1.0
        self.steady: bool | None = None
        self.tight = False  # a minute or more on a tight plateau since it first reached it (a hint, no verdict)
        self._anchor: tuple[float, float, float] | None = None  # computed when asked (step_anchor)
        self._anchor_ts = since
        self.phase_ts = -1e18  # when the process last changed phase (memory footprint)
        self.dips: deque[tuple[float, float, float]] = deque(maxlen=8)  # (start, depth: SM / reference, seconds)
        # the fall being judged, if any: reference level, since when, how, and its mean depth
        self.ep_ref = 0.0
        self.ep_start = 0.0
        self.ep_mode = ""
        self.ep_sum = 0.0
        self.ep_n = 0

    @property
    def established(self) -> bool:
        return self.plateau_blocks * BLOCK_S >= ESTABLISH_S

    def update(self, ts: float, sm: float, fb: float | None, learn: bool) -> None:
        dt = ts - self.fast_ts
        self.fast_ts = ts
        if self.fast < 0:
            self.fast = sm
        elif dt > 0:
            self.fast += dt / (FAST_TAU + dt) * (sm - self.fast)
        if ts < self.b_start:
            return  # warm-up: the process's first seconds are not its level
        if ts - self.b_start >= BLOCK_S and self.b_n:
            self._close(ts, learn)
        if self.b_n == 0:
            self.b_start = ts
        self.b_sum += sm
        self.b_n += 1
        if fb is not None:
            self.b_fb += fb
            self.b_fb_n += 1

    def _close(self, ts: float, learn: bool) -> None:
        mean = self.b_sum / self.b_n
        fb = self.b_fb / self.b_fb_n if self.b_fb_n else -1.0
        self.b_sum, self.b_n, self.b_fb, self.b_fb_n = 0.0, 0, 0.0, 0
        self.recent.append((ts, mean))
        self.recent_max = max(m for _, m in self.recent)
        self._anchor, self._anchor_ts = None, ts
        if fb >= 0 and self.fb_level >= 0 and abs(fb - self.fb_level) > max(PHASE_MIB, PHASE_FRACTION * self.fb_level):
            self.reset(ts)  # a different job in the same process: learn it afresh
        if learn and mean >= IDLE:
            self.blocks.append((mean, fb))
            self.means.append(mean)
            self._derive()

    def reset(self, ts: float) -> None:
        """Forget the level (a phase change, or a fall that became the new normal)."""
        self.blocks.clear()
        self.means.clear()
        self.dips.clear()
        self.level = self.spread = 0.0
        self.plateau_blocks = 0
        self.fb_level = -1.0
        self.steady = None
        self.phase_ts = ts
        self.end_episode()

    def _derive(self) -> None:
        values = sorted(self.means)
        n = len(values)
        level = values[int(0.9 * (n - 1))]
        floor = PLATEAU * level
        plateau = values[bisect.bisect_left(values, floor):]
        k = len(plateau)
        self.level = level
        self.plateau_blocks = k
        self.spread = (plateau[(3 * k) // 4] - plateau[k // 4]) / 1.349  # the plateau's IQR as a sigma
        for mean, fb in reversed(self.blocks):
            if mean >= floor:
                self.fb_level = fb
                break
        first = next(i for i, m in enumerate(self.means) if m >= floor)
        # judged from the first time it reached the plateau: a start-up of minutes says nothing
        worked = n - first
        tight = k >= STEADY_FRACTION * worked and self.spread <= TIGHT * level
        self.tight = worked >= EARLY_BLOCKS and tight
        if worked >= CLASSIFY_BLOCKS and self.steady is not False:  # once seen moving with demand, it will again
            self.steady = tight

    def may_fall(self, drop_ratio: float, step_ratio: float) -> bool:
        """Cheap: whether a fall could start now (below the level's or near the recent blocks' ratio)."""
        fast = self.fast
        return self.established and fast >= IDLE and (
            fast < drop_ratio * self.level or fast < step_ratio * 1.25 * self.recent_max)

    def step_anchor(self) -> tuple[float, float, float]:
        """Where the workload was just before the last 20 s, ``(level, spread, rise)``: a line through
        the blocks of 20-120 s ago (fitted again without the few blocks far off it), read at its
        end, so a rising or falling load is followed and a short burst is ignored; the residuals'
        IQR; and the largest rise over 20 s within the window (a burst that began there is not a
        level to fall from). ``(0, inf, 0)`` with fewer than 6 blocks."""
        if self._anchor is None:
            self._anchor = self._fit_anchor(self._anchor_ts)
        return self._anchor

    def _fit_anchor(self, ts: float) -> tuple[float, float, float]:
        pts = [(end - ts, m) for end, m in self.recent if ANCHOR_TO <= ts - end <= ANCHOR_FROM]
        rise = max((pts[i + 2][1] - pts[i][1] for i in range(len(pts) - 2)), default=0.0)
        fit = _line(pts)
        if fit is not None:  # once more without the few blocks far off the line (a short burst of demand)
            res = [abs(y - fit[0] - fit[1] * x) for x, y in pts]
            cut = max(3.0 * _median(list(res)), 0.02)
            kept = [p for p, r in zip(pts, res, strict=True) if r <= cut]
            if len(kept) >= 0.8 * len(pts):
                fit = _line(kept)
        if fit is None:
            return 0.0, math.inf, 0.0
        a, b, iqr = fit
        return max(0.0, a - b * ANCHOR_TO), iqr, rise

    def high_within(self, ts: float, seconds: float) -> float:
        """The highest block mean of the last ``seconds`` (0 without one)."""
        best = 0.0
        for end, mean in reversed(self.recent):
            if ts - end > seconds:
                break
            best = max(best, mean)
        return best

    # ---- the fall being judged ----
    def start_episode(self, ts: float, ref: float, mode: str) -> None:
        self.ep_ref, self.ep_start, self.ep_mode, self.ep_sum, self.ep_n = ref, ts, mode, 0.0, 0

    def end_episode(self, ts: float | None = None, learn_dip: bool = False, dip_max_s: float = 0.0) -> None:
        """Close the fall being judged; one that recovered within ``dip_max_s`` is remembered as a dip."""
        if learn_dip and ts is not None and self.ep_n and DIP_MIN_S <= ts - self.ep_start <= dip_max_s:
            self.dips.append((self.ep_start, self.ep_sum / self.ep_n / self.ep_ref, ts - self.ep_start))
        self.ep_ref = 0.0
        self.ep_mode = ""

    def episode_depth(self) -> float:
        return self.ep_sum / self.ep_n / self.ep_ref if self.ep_n else 1.0

    def dip_allowance(self, depth: float) -> float:
        """How long the current fall may last because the job has recovered from falls this deep
        (within 0.15 of its depth): 1.2 times the longest, plus 15 s. Once two such dips give
        the job's period (evaluation every N steps), only a fall that begins on that rhythm
        (within 10% of the period, at least a minute) is allowed that long."""
        like = [(start, seconds) for start, d, seconds in self.dips if abs(d - depth) <= 0.15]
        if not like:
            return 0.0
        if len(like) >= 2:
            period = like[-1][0] - like[-2][0]
            if period > 0:
                phase = (self.ep_start - like[-1][0]) % period
                if min(phase, period - phase) > max(60.0, 0.1 * period):
                    return 0.0  # off the job's rhythm: not one of its dips
        return 1.2 * max(seconds for _, seconds in like) + 15.0
