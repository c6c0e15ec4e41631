"""The working level of one workload's SM activity, and what kind of workload it is.

Why not a mean and a spread: a mean seeded by a process's first samples starts from its
start-up (a new CUDA process read 0.25 for two samples, then ran at 0.97: GPU-FACTS.md),
and a spread that learns every evaluation pause and checkpoint grows until no fall can
pass "three spreads below". What a fall is judged against here is the level the
workload *works* at:

* the first ``WARMUP_S`` seconds of a process are never learned;
* samples are folded into 5-second blocks; blocks of an idle GPU (below ``IDLE``) are not
  part of a working level, nor are blocks while a fall is being judged (an incident must
  not become the new normal);
* the level is a high quantile (the 90th percentile) of the last 30 minutes of blocks, so
  dips that take less than a tenth of the time (evaluation, checkpoints, load troughs)
  and a slow start never become the level; the spread is that of the *plateau* blocks
  only (within 15% of the level), so dips never widen it;
* the level counts as established once the workload has worked at it for ``ESTABLISH_S``.

What kind of workload, from behaviour only (names of pods and services are conventions,
not facts). A *steady* workload (training, batch) runs the same step over and over: at
the sampling resolution its activity sits on a plateau whose blocks differ no more than
its per-sample noise explains (``spread`` within ``TIGHT`` of the level, or within
``NOISE_SLACK`` times the noise of a block mean), its per-sample noise is small (a
step's time is regular: the real H200 training loop read a per-sample variation of 8%,
``NOISY`` is 15%), it spends at least 70% of its time on the plateau and leaves it only
in discrete dips. A *demand-driven* workload (serving) moves with its traffic: smooth
waves that make its blocks differ far more than their noise, and request-level (Poisson)
noise of 20% and more per sample. ``tight`` says whether that rule holds over the last
``EARLY_S`` seconds of work at the plateau (enough for a lone process's first minute), and
``calm`` whether it spent them on a plateau it leaves only in dips with per-sample noise
below ``CALM`` (its blocks may wander: the speed of a job's input varies);
the verdict ``steady`` is given after 10 minutes of work since the plateau was first
reached (a start-up of minutes says nothing), and the caller adds a prior before it (a
GPU with other replicas in its service is not yet known to be steady). A serving replica
saturated and flat for ten minutes is judged as steady, unless it was seen moving with
demand before (the verdict "demand-driven" is kept for the process's life).

A *phase change* of the process (it allocated or freed a lot of memory at once: a
different model, batch or task, like a trainer that starts serving) starts the level
afresh: a different job in the same process is not a slower version of the old one,
while an input stall or a slower step keeps the memory it had.

A demand-driven workload's *step* is judged against its step anchor (the lower quartile of
its blocks of the two minutes before): while a run of shortfall adds up (a CUSUM, up to a
minute), that anchor stays where it was when the run began, or a noisy replica's step,
confirmed only after 40 s, would be judged against a level its own first blocks had pulled
down; on a smooth falling wave the run is judged against where the wave has gone since.

``fast`` is an exponentially weighted mean over about ``FAST_TAU`` seconds, weighted by
the time between samples, so sampling intervals do not change its memory.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque

BLOCK_S = 5.0
_BLOCK_GAP = 3.0  # a block longer than this many BLOCK_S spans missing samples
_BLOCK_ALPHA = 0.2  # how fast the blocks' length follows the sampling interval
WINDOW_BLOCKS = 360  # 30 minutes of blocks
WARMUP_S = 10.0
ESTABLISH_S = 30.0
IDLE = 0.05  # below this SM activity the GPU idles: not a working level
ZERO = 0.002  # below this SM activity no kernel runs at all (an idle GPU, not a slower one)
IDLE_S = 10.0  # ... and it is idle once no activity was read for this long
FAST_TAU = 5.0
SLOW_TAU = 20.0
JITTER_ALPHA = 1 / 64
CUSUM_K = 0.175  # half the smallest step of a demand-driven workload that counts (35%)
CUSUM_H = 8.0  # ... and the sum (in units of the samples' noise) that makes it a step
CUSUM_WINDOW = 60.0  # a step is confirmed within this long of its start, or it was a drift
PLATEAU = 0.85  # a block within 15% of the level is on the plateau
STEADY_FRACTION = 0.7
CLASSIFY_S = 600.0  # 10 minutes of work for the verdict
EARLY_S = 40.0  # ... and this long for the hint
TIGHT = 0.03
NOISY = 0.15  # per-sample variation (relative) above which a plateau is request noise, not a job's steps
CALM = 0.1  # ... and below which each second's work is alike (the real H200 training loops read 4-8%)
NOISE_SLACK = 1.5
PHASE_MIB = 2048.0
PHASE_FRACTION = 0.15
BURSTY = 0.2  # samples of a fall that vary this much about their mean (or 2.5x the plateau's): bursts
DIP_MIN_S = 20.0  # shorter falls are transitions, not dips to learn
REPEAT_S = 300.0  # a reported fall recurs as the job's rhythm no sooner than this after it ended
RECOVER_S = 10.0  # a fall ends when activity has been back this long
ANCHOR_FROM, ANCHOR_TO = 150.0, 20.0  # the step anchor: blocks that ended this long ago
FROZEN_BLOCKS = 12  # an anchor holds still during a run of shortfall only when a minute of blocks made it
YOUNG_DEEP = 0.5  # a level not yet established is judged only for a fall this deep (with a host-side cause):
# half its work lost (0.3 missed a 58% and a 65% fall under named contention: the H100 traces w and y)
MAX_BLOCKS = 34  # ... of which the highest is ``recent_max`` (a little more than ANCHOR_FROM)
_HELD_MAX = 24  # blocks held while a recovery is judged (2 minutes: a recovery takes 10-40 s)
RECENT_BLOCKS = 96  # block means kept for the anchor (ANCHOR_FROM, and a reported fall of up to 5 minutes)
_BACK_SAMPLES = 3  # a smooth fall is back once this many samples, over a block, read above its end ratio
SAMPLES = 96  # the latest samples themselves (a minute and more), for telling a job that works in bursts
DUTY_S = 30.0  # ... which it must have done this long
DUTY_HIGH = 0.7  # a burst runs at this fraction of the level or more; a wait reads below IDLE
DUTY_MEAN = 0.6  # ... and all of it together does at most this fraction of the level's work
DUTY_EDGES = 3  # ... in this many bursts, each ended by a wait


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def _alike(a: float, b: float) -> bool:
    """Whether two dips' depths (activity / level) are alike: within 0.05, or a quarter of the
    deeper one's."""
    return abs(a - b) <= max(0.05, 0.25 * max(a, b))


def _line(pts: list[tuple[float, float]]) -> tuple[float, float, float]:
    """A least-squares line through the points (intercept, slope) and its residuals' IQR."""
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    res = sorted(y - a - b * x for x, y in pts)
    return a, b, res[(3 * n) // 4] - res[n // 4]


class ActivityLevel:
    """SM activity of one process set on one GPU; feed every sample with :meth:`update`."""

    __slots__ = ("_anchor", "_anchor_n", "_anchor_ts", "_at", "_line_cache", "b_fb", "b_fb_n", "b_n", "b_sq",
                 "b_start", "b_sum", "block_s", "blocks", "calm", "cusum", "cusum_n", "cusum_since", "cusum_sum",
                 "dips", "ep_abrupt", "ep_back", "ep_blocks", "ep_dsum", "ep_excused", "ep_fallen", "ep_lead",
                 "ep_mode", "ep_n", "ep_prev", "ep_ref", "ep_reported", "ep_runs", "ep_start", "ep_sum", "ep_up",
                 "ep_waits", "fast", "fast_ts", "fb_level", "held", "incident", "jitter", "last", "level", "noise",
                 "noises", "pause", "phase_ts", "plateau_blocks", "rebase_ts", "recent", "recent_max", "recent_means",
                 "samples", "since", "slow", "sorted", "spread", "steady", "tight", "zero_since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.fast = -1.0
        self.slow = -1.0  # the same over about SLOW_TAU seconds (for judging replicas under request noise)
        self.fast_ts = since
        self.last = 0.0
        self.zero_since = -1.0  # since when no SM activity at all was read (-1: there is some)
        self.rebase_ts = since  # blocks that ended before this are not where a step is judged from
        self.incident = (0.0, 0.0)  # the last reported fall (start, end): its blocks are no level to step from
        self.pause = (-1e18, -1e18)  # the last fall closed before its work came back (start, last block's end)
        self.jitter = 0.0  # mean absolute change between successive samples
        self.cusum = 0.0
        self.cusum_since = 0.0
        self.cusum_sum = 0.0
        self.cusum_n = 0
        self.b_start = since + WARMUP_S
        self.b_sum = 0.0
        self.b_sq = 0.0
        self.b_n = 0
        self.b_fb = 0.0
        self.b_fb_n = 0
        # how long a block lasts as the agent samples now: 5 s at 1 Hz, up to 10 s when its interval
        # stretches (its CPU budget, a setting: 2-10 s), so that "worked 30 s at its level" is 30 s of
        # work whatever the interval (at 2 s six 6-s blocks are 36 s, which counted as 30 did not
        # establish a level the real traces' jobs had held for 30 s before their stalls)
        self.block_s = BLOCK_S
        self.blocks: deque[tuple[float, float, float]] = deque(maxlen=WINDOW_BLOCKS)  # (mean SM, mean FB MiB, end)
        self.sorted: list[float] = []  # the same means, sorted
        self.recent: deque[tuple[float, float]] = deque(maxlen=RECENT_BLOCKS)  # (end ts, mean SM) of every block
        self.recent_means: deque[float] = deque(maxlen=MAX_BLOCKS)  # the latest of the same means alone
        self.recent_max = 0.0  # the highest of them
        self.samples: deque[tuple[float, float]] = deque(maxlen=SAMPLES)  # (ts, SM) of the latest samples
        self.noises: deque[float] = deque(maxlen=16)  # per-sample variation (relative) of recent plateau blocks
        self.noise = 0.0  # their median
        self.level = 0.0
        self.spread = 0.0
        self.plateau_blocks = 0
        self.fb_level = -1.0
        self.steady: bool | None = None
        self.tight = False  # EARLY_S or more on a tight plateau since it first reached it (a hint, no verdict)
        self.calm = False  # ... or on a plateau it leaves only in dips, with calm samples (a hint for a lone GPU)
        self._anchor = -1.0  # computed when asked (step_anchor; -1: not yet)
        self._anchor_ts = since
        self._anchor_n = 0  # how many blocks made it
        self._at: tuple[float, float] = (-1.0, 0.0)  # the last anchor_at: (ts, anchor)
        # the last step_line: (its blocks' key, intercept, slope, roughness)
        self._line_cache: tuple[tuple[float, float, tuple[float, float]], float, float, float] | None = None
        self.phase_ts = -1e18  # when the process last changed phase (memory footprint)
        # (start, depth: SM / reference, seconds, whether its samples came in bursts)
        self.dips: deque[tuple[float, float, float, bool, bool]] = deque(maxlen=8)
        # the fall being judged, if any: reference level, since when, how, whether it came within seconds;
        # its samples' sum, count, last one and the sum of the changes between them; its blocks' depths
        self.ep_ref = 0.0
        self.ep_start = 0.0
        self.ep_mode = ""
        self.ep_abrupt = False
        self.ep_sum = 0.0
        self.ep_n = 0
        self.ep_prev = 0.0
        self.ep_dsum = 0.0
        self.ep_blocks: list[float] = []
        self.ep_up = -1.0  # since when activity is back above the fall's end ratio (-1: it is not)
        self.ep_back = False
        self.ep_reported = False  # whether this fall was reported (an open anomaly of another fall is not its)
        self.ep_lead = 0.0  # how long before it was seen below its ratio the fall left the plateau
        self.ep_waits = False  # whether it is known to be a job waiting for work (duty_cycled), whatever its depth
        self.ep_fallen = 0.0  # the fraction of the reference below which the fall's blocks count (0: all)
        # seconds of the fall excused as known dips, and the current run of blocks like one of them
        self.ep_excused = 0.0
        self.ep_runs: dict[int, float] = {}
        # blocks of work after the fall's recovery began (mean, FB, end, variance): learned if it ends so
        self.held: list[tuple[float, float, float, float]] = []

    def idle(self, ts: float) -> bool:
        """No SM activity at all for ``IDLE_S``: an idle GPU, not a starved job (whose activity
        arrives in bursts of a few percent, never zero for seconds on end)."""
        return self.zero_since >= 0 and ts - self.zero_since >= IDLE_S

    @property
    def established(self) -> bool:
        return self.plateau_s >= ESTABLISH_S

    @property
    def plateau_s(self) -> float:
        """Seconds of work at the level among the kept blocks."""
        return self.plateau_blocks * self.block_s

    def update(self, ts: float, sm: float, fb: float | None, learn: bool) -> None:
        last_ts = self.fast_ts
        dt = ts - last_ts
        if sm >= ZERO:
            self.zero_since = -1.0
        elif self.zero_since < 0:
            self.zero_since = last_ts  # SM activity is a mean over the time since the last sample
        self.fast_ts = ts
        fast = self.fast
        if fast < 0:
            self.fast = self.slow = sm
        elif dt > 0:
            self.fast = fast + dt / (FAST_TAU + dt) * (sm - fast)
            self.slow += dt / (SLOW_TAU + dt) * (sm - self.slow)
        self.jitter += (abs(sm - self.last) - self.jitter) * JITTER_ALPHA
        self.last = sm
        self.samples.append((ts, sm))
        b_start = self.b_start
        if ts < b_start:
            return  # warm-up: the process's first seconds are not its level
        if self.b_n and ts - b_start >= BLOCK_S:
            self._close(ts, learn)
        if self.plateau_blocks and self.steady is not True:
            self._cusum(ts, sm)
        if self.b_n == 0:
            self.b_start = ts
        self.b_sum += sm
        self.b_sq += sm * sm
        self.b_n += 1
        if fb is not None:
            self.b_fb += fb
            self.b_fb_n += 1

    def _cusum(self, ts: float, sm: float) -> None:
        """A one-sided CUSUM of the samples' shortfall from the step anchor, in units of their
        noise, less half the smallest step of interest (``CUSUM_K``): it climbs at once after a
        real step and stays near zero under request noise, bursts and waves; ``cusum_sum`` and
        ``cusum_n`` are the samples since it last left zero (the new level, if it is a step)."""
        if self.cusum <= 0.0 and ts - self._anchor_ts > 2 * BLOCK_S:
            self._anchor, self._anchor_ts = -1.0, ts  # a run starts from where it sits now, not where a past run did
        ref = self._anchor if self._anchor >= 0 else self.step_anchor()
        if ref <= 0:
            self.cusum = 0.0
            return
        noise = max(self.jitter / 1.128, 0.01 * ref)  # independent samples: mean |change| = 1.13 sigma
        inc = (ref * (1.0 - CUSUM_K) - sm) / noise
        if self.cusum <= 0.0:
            if inc <= 0.0:
                return
            self.cusum_since, self.cusum_sum, self.cusum_n = ts, 0.0, 0
        self.cusum = max(0.0, self.cusum + inc)
        self.cusum_sum += sm
        self.cusum_n += 1

    def _close(self, ts: float, learn: bool) -> None:
        n = self.b_n
        span = ts - self.b_start
        mean = self.b_sum / n
        var = max(0.0, self.b_sq / n - mean * mean) * n / (n - 1) if n > 1 else -1.0
        fb = self.b_fb / self.b_fb_n if self.b_fb_n else -1.0
        self.b_sum, self.b_sq, self.b_n, self.b_fb, self.b_fb_n = 0.0, 0.0, 0, 0.0, 0
        self.recent.append((ts, mean))
        self.recent_means.append(mean)
        self.recent_max = max(self.recent_means)
        if self.ep_ref and self.ep_up < 0 and self.b_start >= self.ep_start:
            self._excuse(mean / self.ep_ref, self.b_start, min(ts - self.b_start, 2 * BLOCK_S))
        since = self.cusum_since
        if not (self.cusum > 0.0 and self._anchor_ts <= since and ts - since <= CUSUM_WINDOW
                and self.step_anchor() > 0.0 and self._anchor_n >= FROZEN_BLOCKS):
            # while a run of shortfall is under way, the anchor stays where it was when the run began:
            # the run's own blocks are not where it stepped from, or a step confirmed after 40 s would be
            # judged against a level its first 20 s had already pulled down. Only an anchor of a minute of
            # blocks or more holds still: its lower quartile is no burst of demand that just ended (one
            # shorter than three quarters of it), while one of a few blocks (after a rebase) may be one
            self._anchor, self._anchor_ts = -1.0, ts
        if fb >= 0 and self.fb_level >= 0 and abs(fb - self.fb_level) > max(PHASE_MIB, PHASE_FRACTION * self.fb_level):
            self.reset(ts)  # a different job in the same process: learn it afresh
        if mean < IDLE:
            return
        if learn:
            self._learn(mean, fb, ts, var, span)
        elif self.ep_ref and 0 <= self.ep_up <= self.b_start and len(self.held) < _HELD_MAX:
            # the GPU is back at work while the fall is still being judged: learned if the fall ends as
            # recovered (the real H200 trace j: a checkpoint's 15 s of recovery were all the training that
            # came before its next fall, and a level of 15 s is no established one)
            self.held.append((mean, fb, ts, var))

    def _learn(self, mean: float, fb: float, ts: float, var: float, span: float = -1.0) -> None:
        """``span``: the block's length (-1: not known, a block held while a recovery was judged)."""
        if mean >= PLATEAU * self.level and 0.0 < span <= _BLOCK_GAP * BLOCK_S:
            # the plateau's blocks alone say how long a block of work lasts: a job starved of CPU starves
            # the agent beside it too, whose samples then come 10-20 s apart (the real trace r under 3
            # burners per core), and those blocks would make the plateau's few seconds look long; a
            # longer one spans a gap in the samples, not the interval (the first says it at once: a
            # level is established 30 s into a job, not later)
            self.block_s += (span - self.block_s) * (_BLOCK_ALPHA if self.blocks else 1.0)
        if var >= 0 and mean >= PLATEAU * self.level:
            noises = self.noises
            noises.append(math.sqrt(var) / mean)
            self.noise = sorted(noises)[len(noises) // 2]
        blocks = self.blocks
        if len(blocks) == WINDOW_BLOCKS:
            old = blocks[0][0]
            del self.sorted[bisect.bisect_left(self.sorted, old)]
        blocks.append((mean, fb, ts))
        bisect.insort(self.sorted, mean)
        self._derive()

    def reset(self, ts: float) -> None:
        """Forget the level (a phase change, or a fall that became the new normal)."""
        self.blocks.clear()
        self.sorted.clear()
        self.dips.clear()
        self.noises.clear()
        self.noise = 0.0
        self.level = self.spread = 0.0
        self.plateau_blocks = 0
        self.fb_level = -1.0
        self.steady = None
        self.tight = self.calm = False
        self.phase_ts = ts
        self.rebase_ts, self._anchor, self._at = ts, -1.0, (-1.0, 0.0)  # nor is a step judged from the old job's blocks
        self.end_episode()
        self.pause = (-1e18, -1e18)

    def _derive(self) -> None:
        values = self.sorted
        n = len(values)
        level = values[int(0.9 * (n - 1))]
        floor = PLATEAU * level
        lo = bisect.bisect_left(values, floor)
        k = n - lo
        self.level = level
        self.plateau_blocks = k
        self.spread = (values[lo + (3 * k) // 4] - values[lo + k // 4]) / 1.349  # the plateau's IQR as a sigma
        blocks = self.blocks
        for mean, fb, _ in reversed(blocks):
            if mean >= floor:
                self.fb_level = fb
                break
        first = next(i for i, (m, _, _) in enumerate(blocks) if m >= floor)
        # judged from the first time it reached the plateau: a start-up of minutes says nothing
        worked = (n - first) * self.block_s
        # a block mean of ~BLOCK_S samples varies by noise / sqrt(BLOCK_S) from sampling alone
        allowed = max(TIGHT, NOISE_SLACK * self.noise / math.sqrt(BLOCK_S)) * level
        on_plateau = k >= STEADY_FRACTION * (n - first)
        tight = on_plateau and self.spread <= allowed and self.noise <= NOISY
        tight_now = worked >= EARLY_S and tight
        calm_now = worked >= EARLY_S and on_plateau and self.noise <= CALM
        if blocks[-1][0] < floor:
            # a fall or dip under way says nothing yet of what kind of work this is (its first
            # blocks lower the plateau's share and raise the noise; the real H200 trace g's job
            # stopped being "calm" two seconds into the fall that was then judged): it may
            # confirm the hints, not undo them, until the GPU is back at its level
            self.tight, self.calm = self.tight or tight_now, self.calm or calm_now
            return
        self.tight, self.calm = tight_now, calm_now
        # the verdict asks for as many blocks as at 1 Hz, however long they are: a block of one sample
        # (every 5-10 s) says less of how a replica's work varies than one of five, and judging such
        # replicas after 10 minutes of time rather than of blocks made 7 more false drops over the held-out
        # suites, replicas taken for steady jobs (they are sampled every 5-10 s; round 15, docs/benchmarks.md)
        if (n - first) * BLOCK_S >= CLASSIFY_S and self.steady is not False:  # once seen moving with demand, ...
            self.steady = tight

    def may_fall(self, drop_ratio: float, step_ratio: float) -> bool:
        """Cheap: whether a fall could start now (below the level's or near the recent blocks' ratio;
        for a level not yet established, a deep fall from its highest recent block)."""
        fast = self.fast
        if fast <= 0.0:
            return False
        if not self.established:  # a deep fall, or a job that works in bursts (duty_cycled)
            return self.plateau_blocks > 0 and fast < DUTY_MEAN * self.recent_max
        return fast < drop_ratio * self.level or fast < step_ratio * 1.25 * self.recent_max

    def left_plateau(self, ref: float, ts: float, within: float) -> float:
        """When activity last left ``ref``'s plateau: the end of the latest block at or above
        ``PLATEAU`` of it in the last ``within`` seconds (``ts - within`` if none was). A fall is
        judged from there, not from when the evidence of its cause came in."""
        floor = PLATEAU * ref
        for end, mean in reversed(self.recent):
            if ts - end > within:
                break
            if mean >= floor:
                return end
        return ts - within

    def duty_cycled(self, since: float, ts: float, ref: float) -> bool:
        """Whether, since ``since`` (and for ``DUTY_S`` at least), the samples came as bursts at the
        level ``ref`` (``DUTY_HIGH`` of it or more) between waits of an idle GPU (below ``IDLE``),
        ``DUTY_EDGES`` bursts or more, few samples between the two, and doing ``DUTY_MEAN`` of the
        level's work or less. Why: a job whose input cannot keep up runs each step at full speed
        as soon as its batch arrives, then waits for the next one (the real H200 traces j and m:
        2-2.5 s of steps, 3-3.5 s waits; their samples read 0.31-0.38 at the level, 0.52-0.54 idle,
        9-17% between: benchmarks/gpu/duty_fractions.py). Nothing else a GPU does reads like that:
        a serving replica's activity moves with its requests through every value between, and is
        seldom idle (22-58% of its samples between, 0-3% idle, in every real trace), an evaluation
        is one smooth lower plateau, a checkpoint or a stall one long wait or one long trickle, and
        a job that always worked in bursts has no level above its bursts' mean to fall from
        (``ref`` is a 5-second block's mean). The samples of the last reported fall are that fall's,
        not the next one's: the held-out H100 trace x's loader bursts, reported and recovered, were
        read 5 s into its contention as a minute of waiting, and that anomaly opened at once with a
        start inside the loader's."""
        since = max(since, self.incident[1])
        if ts - since < DUTY_S or ref <= 0.0:
            return False
        high = DUTY_HIGH * ref
        n = hi = lo = edges = 0
        total = 0.0
        waited = False
        first = ts
        for t, sm in reversed(self.samples):
            if t <= since:
                break
            first = t
            n += 1
            total += sm
            if sm >= high:
                hi += 1
                edges += waited  # read backwards: this burst ended in a wait
                waited = False
            elif sm < IDLE:
                lo += 1
                waited = True
        if n < 12 or ts - first < DUTY_S:
            return False  # too few samples kept to tell
        return (edges >= DUTY_EDGES and hi >= 0.15 * n and lo >= 0.2 * n and n - hi - lo <= 0.25 * n
                and total <= DUTY_MEAN * ref * n)

    def forget_since(self, since: float) -> None:
        """Unlearn the blocks that ended after ``since``: the way down of a fall that turned out to
        be an incident (a drift is learned for a minute before it is judged; the real H200 trace
        i's job was no longer "calm" after one, and its next fall waited for the stricter rule)."""
        blocks = self.blocks
        dropped = False
        while blocks and blocks[-1][2] > since:
            mean = blocks.pop()[0]
            del self.sorted[bisect.bisect_left(self.sorted, mean)]
            dropped = True
        if dropped and blocks:
            self._derive()

    def step_anchor(self) -> float:
        """Where the workload sat before the last 20 s: the lower quartile of the block means of
        20-150 s ago (a burst of demand, up to three quarters of that time, is not the level it
        works at; on a falling wave the quartile is the recent end, so a wave is not a step;
        blocks of an idle GPU, a checkpoint's or a drained replica's, are no level it works at:
        trace f's stall was no step from a checkpoint 25 s before); 0 with fewer than 6 blocks.
        :meth:`step_line` adds the line a smoothly rising or falling load is on."""
        anchor = self._anchor
        if anchor < 0:
            means = self._window(self._anchor_ts)
            self._anchor_n = len(means)
            anchor = self._anchor = self._quartile(means)
        return anchor

    def peek_anchor(self) -> float:
        """:meth:`step_anchor` without keeping it (what another replica is told: asking must not
        change when this one computes its own)."""
        return self._anchor if self._anchor >= 0 else self._quartile(self._window(self._anchor_ts))

    def anchor_at(self, ts: float) -> float:
        """The step anchor as it was at ``ts`` (a peer's, at the moment another replica stepped: what
        it rose from is where it sat then, not where its rise has since taken its own anchor). Asked
        for the same moment on every sample of a fall, so the last answer is kept."""
        at, value = self._at
        if at != ts:
            value = self._quartile(self._window(ts))
            self._at = (ts, value)
        return value

    @staticmethod
    def _quartile(means: list[float]) -> float:
        if len(means) < 6:
            return 0.0
        means.sort()
        return means[len(means) // 4]

    def _window(self, ts: float) -> list[float]:
        since = self.rebase_ts
        a, b = self.incident
        far = self._far(ts)
        return [m for end, m in self.recent if ANCHOR_TO <= ts - end <= far and end >= since and m >= IDLE
                and not a < end <= b]

    def _far(self, ts: float) -> float:
        """How far back the step anchor looks: ``ANCHOR_FROM``, and as much again as a reported
        fall within it took (its blocks are left out, so the work before it stands in)."""
        a, b = self.incident
        return ANCHOR_FROM + (b - a if ts - b <= ANCHOR_FROM else 0.0)

    def step_line(self, at: float | None = None) -> tuple[float, float]:
        """The least-squares line through the same blocks, read at its end (or at the time ``at``),
        and how far they are from smooth: the larger of its residuals' interquartile range and the
        largest change between neighbouring blocks (a burst's edge). Where a load on a smooth wave
        was (or would be by ``at``), if it was on one. ``(0, inf)`` with fewer than 6 blocks. The
        line is kept while the anchor's blocks stay the same (a run of shortfall asks on every sample)."""
        ts, since = self._anchor_ts, self.rebase_ts
        key = (ts, since, self.incident)
        cached = self._line_cache
        if cached is None or cached[0] != key:
            a, b = self.incident
            far = self._far(ts)
            pts = [(end - ts, m) for end, m in self.recent if ANCHOR_TO <= ts - end <= far and end >= since
                   and not a < end <= b]
            if len(pts) < 6:
                cached = (key, 0.0, 0.0, math.inf)
            else:
                icpt, slope, iqr = _line(pts)
                cached = (key, icpt, slope, max(iqr, max(abs(q[1] - p[1]) for p, q in itertools.pairwise(pts))))
            self._line_cache = cached
        _, icpt, slope, rough = cached
        if rough == math.inf:
            return 0.0, math.inf
        return max(0.0, icpt + slope * (-ANCHOR_TO if at is None else at - ts)), rough

    def rebase(self) -> None:
        """The step being judged was explained (demand moved): where the workload sits after it is
        its new normal, so no step is judged from where it was before."""
        self.rebase_ts = self.ep_start + BLOCK_S
        self._anchor, self._at = -1.0, (-1.0, 0.0)
        self.end_episode()

    def worked_within(self, ts: float, seconds: float) -> float:
        """The highest block mean of the last ``seconds``, or, where a pause (``pause``) ended within
        them, of the ``seconds`` before the pause began and since."""
        start, end = self.pause
        return self.high_within(ts, seconds if end < ts - seconds else ts - start + seconds)

    def high_within(self, ts: float, seconds: float) -> float:
        """The highest block mean of the last ``seconds`` (0 without one)."""
        best = 0.0
        for end, mean in reversed(self.recent):
            if ts - end > seconds:
                break
            best = max(best, mean)
        return best

    def mean_between(self, start: float, end: float) -> float:
        """The mean of the block means that ended within ``[start, end]`` (-1 without one)."""
        total, n = 0.0, 0
        for t, mean in reversed(self.recent):
            if t < start:
                break
            if t <= end:
                total += mean
                n += 1
        return total / n if n else -1.0

    def low_between(self, start: float, end: float) -> float:
        """The lowest block mean of those that ended within ``[start, end]`` (-1 without one)."""
        low = -1.0
        for t, mean in reversed(self.recent):
            if t < start:
                break
            if t <= end and (low < 0 or mean < low):
                low = mean
        return low

    def on_rhythm(self, start: float) -> bool | None:
        """Whether the fall being judged, beginning at ``start``, comes on the rhythm of the job's
        dips like it (within 10% of a period, at least a minute); None while no three dips like it
        agree on a period. Why: a job's evaluations recur every N steps, so once their period is
        known a fall like them but off it is not one of them. A fall unlike every dip with a known
        rhythm says nothing: it may be another of the job's events, not seen yet (a checkpoint
        every few hours). Three, as the dips remembered skip some of the job's (one that ran into
        a throttle or a lost GPU is not learned), so a gap between two may be several periods:
        the shortest gap is the period when every other is a multiple of it."""
        depth = _median(self.ep_blocks) if self.ep_blocks else self.episode_depth()
        bursts = self.bursty()
        times = [t for t, d, _, bursty, reported in self.dips if not reported and bursty == bursts and _alike(d, depth)]
        gaps = [b - a for a, b in itertools.pairwise(times) if b - a >= 120.0]
        if len(gaps) < 2:
            return None
        period = min(gaps)
        slack = max(60.0, 0.1 * period)
        if any(abs(g - round(g / period) * period) > slack for g in gaps):
            return None
        phase = (start - times[-1]) % period
        return min(phase, period - phase) <= slack

    # ---- the fall being judged ----
    def start_episode(self, ts: float, ref: float, mode: str, abrupt: bool, reported: bool = False,
                      lead: float = 0.0, waits: bool = False, fallen: float = 0.0) -> None:
        """A fall from ``ref`` that began at ``ts``, first seen below its ratio ``lead`` seconds later;
        ``waits``: the job is known to wait for work (it is judged as one, whatever its depth);
        ``fallen``: the fraction of ``ref`` below which the GPU counts as fallen (its ratio; 0: every
        block counts)."""
        self.ep_ref, self.ep_start, self.ep_mode, self.ep_abrupt = ref, ts, mode, abrupt
        self.ep_waits = waits
        self.ep_fallen = fallen
        self.ep_reported = reported
        self.ep_lead = lead
        self.ep_sum, self.ep_dsum, self.ep_n, self.ep_up = 0.0, 0.0, 0, -1.0
        self.ep_back = False  # its samples came back for a block: its recovery is under way (``recovered``)
        self.ep_blocks = []
        self.ep_excused = 0.0
        self.ep_runs = {}

    def recovered(self, ts: float, ratio: float) -> bool:
        """Whether activity has been back above ``ratio`` of the fall's reference for ``RECOVER_S``
        (a burst of a bursty stall is not a recovery: in a fall that comes in bursts, as in a
        demand-driven workload's under request noise, the slow mean must be back too; a job known
        to wait between its bursts must have worked without a wait)."""
        floor = ratio * self.ep_ref
        if self.ep_waits:
            # a job that worked in bursts between waits is back once it works without a wait: the slow
            # mean would take the next 20 s to say so (the real H200 trace j's next fall came 20 s after)
            down = self.fast < floor or self.last < IDLE
        else:
            down = self.fast < floor or ((self.ep_mode != "steady" or self.bursty()) and self.slow < floor)
            if self.ep_abrupt and not self.bursty() and (self.ep_mode == "steady" or (
                    self.ep_mode == "unsure" and (self.tight or self.calm))):
                # (a job's plateau only: a replica's samples wander above and below a fall's ratio with
                # its requests, and a few above it do not end the fall; the held-out generator's replica
                # that lost 40% of its capacity, 0.19-0.30 about a ratio of 0.25, was "back" in 80 s)
                down = down and not self._back_for_a_block(floor, ts)
        if down:
            self.ep_up = -1.0
            return False
        if self.ep_up < 0:
            self.ep_up = ts
        return ts - self.ep_up >= RECOVER_S

    def _back_for_a_block(self, floor: float, ts: float) -> bool:
        """Whether a smooth fall that came at once (an evaluation's plateau; a drift hovers about its
        ratio) had its samples back above ``floor`` for a block (``BLOCK_S``) before this one, since
        when a sample or two below (a loader's hiccup) do not undo its recovery: the fast
        mean takes seconds to say a fall has ended. An independently written fleet's one-GPU fine-tune
        (0.72, a hiccup to 0.04 for 2 s every few minutes) came back from its 88-s evaluation for 5 s and
        hiccuped: the fast mean had said it was back 2 s before, the hiccup restarted the recovery, and
        the evaluation, past the 90-s hold, was reported (docs/benchmarks.md, round 26). Once back for a
        block, the fall's recovery is timed from when its samples came back. The same for a job whose
        kind its first ten minutes do not yet tell (``unsure``: LoRA fine-tunes of several teams under one
        service, judged as its replicas) whose samples sat on a tight or calm plateau, as a job's do,
        whose recovery also waits for the slow mean: an 84-s evaluation back 3 s before the 90-s hold
        was reported 17 s later (round 27)."""
        if self.ep_back:
            return True
        back, n = -1.0, 0
        for t, sm in reversed(self.samples):
            if t >= ts:
                continue  # (the sample being judged: it is below)
            if sm < floor:
                break
            back, n = t, n + 1
        if n < _BACK_SAMPLES or ts - back < BLOCK_S:
            return False  # (a sample or two back, read every 5 or 10 s, are a stall's bursts as often)
        self.ep_back = True
        self.ep_up = back if self.ep_up < 0 else min(self.ep_up, back)
        return True

    def add_to_episode(self, sm: float) -> None:
        if self.ep_n:
            self.ep_dsum += abs(sm - self.ep_prev)
        self.ep_prev = sm
        self.ep_sum += sm
        self.ep_n += 1

    def end_episode(self, ts: float | None = None, learn_dip: bool = False, dip_max_s: float = 0.0,
                    reported: bool = False, paused: bool = False) -> None:
        """Close the fall being judged; one that recovered within ``dip_max_s`` is remembered as a
        dip: its typical depth (the median of its blocks', so a checkpoint running into an
        evaluation is remembered by the longer part), how long it lasted, and whether it was
        ``reported`` as an anomaly (then it is the job's rhythm only once it recurs: ``_like``)."""
        if self.ep_up >= 0 and ts is not None:
            ts = self.ep_up  # it ended when activity came back
        if reported and ts is not None:
            # an incident's blocks are not where the workload sits: the next fall (the real H200 trace
            # f's contention, 25 s after a reported stall) steps from the work between them
            self.incident = (self.ep_start, ts + BLOCK_S)
            self._anchor, self._at = -1.0, (-1.0, 0.0)
        if learn_dip and ts is not None and self.ep_n and DIP_MIN_S <= ts - self.ep_start <= dip_max_s:
            depth = _median(self.ep_blocks) if self.ep_blocks else self.ep_sum / self.ep_n / self.ep_ref
            self.dips.append((self.ep_start, depth, ts - self.ep_start, self.bursty(), reported))
        if self.ep_ref:
            # ``paused``: closed by what explains it (a barrier's spin read as launch-bound work) with the work
            # not back: what follows it steps from the work before it (``ActivityLevel.worked_within``)
            self.pause = (self.ep_start, self.recent[-1][0] if self.recent else self.ep_start) \
                if paused and self.ep_up < 0 else (-1e18, -1e18)
        held, self.held = self.held, []
        if self.ep_up >= 0 and ts is not None:
            for block in held:  # it recovered: the work since it came back is the job's
                self._learn(*block)
        self.ep_ref = 0.0
        self.ep_mode = ""
        self.ep_n = 0
        self.cusum = 0.0

    def episode_depth(self) -> float:
        return self.ep_sum / self.ep_n / self.ep_ref if self.ep_n else 1.0

    def bursty(self) -> bool:
        """Whether the fall's samples come in bursts (a step runs whenever a batch arrives, then
        the GPU waits), beyond the plateau's own noise."""
        return self.episode_variation() >= max(BURSTY, 2.5 * self.noise)

    def episode_variation(self) -> float:
        """How much the fall's samples vary from one to the next, relative to their mean (about their
        coefficient of variation for independent samples: the mean absolute change is 1.13 sigma),
        so that bursts count and a fall in two flat parts does not."""
        n = self.ep_n
        if n < 3 or self.ep_sum <= 0:
            return 0.0
        return self.ep_dsum / (n - 1) / 1.128 / (self.ep_sum / n)

    def unexcused(self, ts: float) -> float:
        """Seconds of the fall so far that no known dip explains."""
        return ts - self.ep_start - self.ep_excused

    def _excuse(self, depth: float, start: float, span: float) -> None:
        """Fold one block of the fall in: time in blocks like one of the job's dips, no longer in
        all than that dip may last (``dip_allowance``), is excused; once the fall has spent longer
        like it, none of that time is. So a checkpoint running into an evaluation is two known
        dips, while a stall of a depth the job never recovered from is judged by its whole
        length, and so is a bursty stall whose blocks are like a known dip only now and then
        (counted per run of blocks, each burst would start the dip's allowance anew)."""
        if len(self.ep_blocks) < 64:
            self.ep_blocks.append(depth)
        if depth >= self.ep_fallen > 0 and not self.ep_waits and not self.bursty():
            # back above the ratio but not yet recovered (the band between them): not fallen, so not
            # counted. A smooth fall's time is its time below the ratio; the band only decides when it
            # ends (a pod's checkpoint at a tenth of its level ran into its evaluation at 0.62, which
            # alone never starts a fall, and the evaluation's minutes were counted as the checkpoint's)
            self.ep_excused += span
            return
        dip, allowance = self._like(depth, start)
        if dip < 0:
            return
        spent = self.ep_runs.get(dip, 0.0) + span
        self.ep_runs[dip] = spent
        if spent <= allowance:
            self.ep_excused += span
        elif spent - span <= allowance:
            self.ep_excused -= spent - span  # it overran its dip: none of its time is excused

    def _like(self, depth: float, start: float) -> tuple[int, float]:
        """The known dip a block this deep at ``start`` is like (-1 if none), and how long such a
        run may last: 1.2 times the longest dip like it, plus 15 s. Alike means within 0.05 or a
        quarter of the deeper one's depth, and of the same character (a smooth evaluation pass
        says nothing about a fall that comes in bursts, nor the other way round). Once two such
        dips give the job's period (evaluation every N steps), only a run that begins on that
        rhythm (within 10% of the period, at least a minute) is allowed. A dip that was reported
        as an anomaly says nothing of a fall that begins within ``REPEAT_S`` of its end: that is
        the next incident (the real H200 trace g: a single-thread input fall 22 s after a stall
        of its depth), not the job's next evaluation (a rhythm of minutes)."""
        best, longest, last, prev = -1, 0.0, -1.0, -1.0
        bursts = self.bursty()
        for i, (t, d, seconds, bursty, reported) in enumerate(self.dips):
            if reported and start - (t + seconds) < REPEAT_S:
                continue
            if bursty == bursts and _alike(d, depth):
                best = i
                longest = max(longest, seconds)
                prev, last = last, t
        if best < 0:
            return -1, 0.0
        if prev >= 0 and last > prev:
            period = last - prev
            phase = (start - last) % period
            if min(phase, period - phase) > max(60.0, 0.1 * period):
                return -1, 0.0  # off the job's rhythm: not one of its dips
        return best, 1.2 * longest + 15.0
