"""HBM hotter than the GPU's own die and memory traffic say it should be.

Why a model and not the temperature: HBM heats with the load like the die does, and the
difference between them depends on the work (how much of the power is the SMs', how much the
memory's). On 32 real traces (H100 and H200: idle, training, serving, stalls, launch-bound
and memory-bound phases, benchmarks/data) HBM minus die ranged over up to 24 °C within one
trace, so a rule on the temperature or on the difference either fires on a memory-bound phase
or misses a cooling fault. Fitted as ``a + b * die + c * DRAM activity`` (in one pass over each
trace) they leave a residual of 0.7-1.4 °C (SD). Fitted as here, online and with how far the die and
the traffic are from their own recent past (the HBM lags behind the die: its time constant is
longer), the residual's one-minute mean never exceeded 2.2 °C once the fit had two minutes of
samples (2.6 °C with the minute's change as the lag terms, 3.8 °C without lag terms;
benchmarks/hbm_residual.py, docs/benchmarks.md, rounds 22 and 25).

Why the lag terms are distances from exponential means, not changes over a minute: HBM that lags
behind its load is a first-order system, and what it still owes is the load's distance from the
exponential mean of its past at the HBM's time constant. A change over the last minute forgets a
load change two minutes old that the HBM has not caught up with (an independently written fleet
whose stacks settle in about 90 s: an hour after a job ended, its die at 31 °C for two minutes,
its HBM still 8 °C warm and cooling), and takes a short pause's way back up for a cold start (a
30-s dip cooled the die 25 °C but the HBM 15 °C; back at work, the die's 12 °C climb over the
minute put the HBM 8 °C lower than it was). One time constant (``TAU``), a minute: the real H100
and H200 traces' HBM settles within 15-30 s, that fleet's in about 90 s, and the fit's weights scale
the lag. Two (30 s and 120 s, seven terms) fitted the traces it was tried on better and fresh ones
worse: a young fit with more terms is wrong more often at loads it knows little of.
What makes HBM run hotter than that at the same die temperature and traffic is its own
cooling: a cold plate losing contact over the stacks, a pump or a fan failing on that side,
a stack degrading. It is reported when the residual's one-minute mean reaches ``HOT_C``,
three times the worst a real trace showed.

Why its own detector and not the general one's: the general detector judges a metric against
what the same workload showed at its working level, so it sees only steady workloads at their
plateau. A serving replica's load moves, so it never looked (1 of 18 HBM faults found on an
independently written fleet, most of them on replicas).

The fit is recursive least squares per GPU (not per workload: the relation is the board's and
its cooling's, while the DRAM term carries the workload), a sample's weight halving in 45 min
(``FORGET``), started from "HBM follows the die" (slope 1). It learns only from samples within
``LEARN_C`` of its prediction (those below it, clipped there), so an excursion does not teach it
that hot is normal; one that lasts ``RELEARN_S`` is the GPU's new normal and the fit starts
again. It judges nothing before it has learned from ``WARM`` samples and followed the GPU within
``LEARN_C`` for a minute.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from collector.detect.anomaly import AnomalyKind
from collector.detect.finding import Finding
from telemetry.clocks import THERMAL
from telemetry.keys import MEMORY_TEMP

if TYPE_CHECKING:
    from collector.detect.state import GpuState

KIND: Final[AnomalyKind] = "metric_anomaly"  # (the general detector's kind: a metric unlike before)

EVERY: Final = 10.0  # seconds between samples folded in (HBM heats over minutes)
FORGET: Final = 0.9974  # per sample: a sample's weight halves in 45 min (265 samples)
WARM: Final = 90  # samples (15 minutes) the fit learns from before it is trusted
LEARN_C: Final = 3.0  # samples this far above the prediction or more are not learned from
HOT_C: Final = 8.0  # a one-minute mean residual of this many °C: HBM runs hot
WINDOW_S: Final = 60.0
TAU: Final = 60.0  # seconds: the time constant of the lag the fit carries (HBM behind its load)
RELEARN_S: Final = 1800.0
DRAM_STALE_S: Final = 60.0  # a DRAM activity reading stands for the samples without one this long
NEW_DIE_C: Final = 5.0  # a die this much beyond the temperatures learned from is a load not seen yet ...
NEW_DRAM: Final = 0.1  # ... and so is DRAM activity this far beyond
NEW_LEARN_S: Final = 300.0  # a load not seen yet is learned for this long (several HBM time constants)
DIE_FAULT_HOLD_S: Final = 900.0  # after the die was last held at its limit, the fit learns nothing this long
KEEP_S: Final = 300.0  # the fit a die fault sends it back to is this old or older
# the prior: offset free, slope near 1 (HBM follows the die), the DRAM term and the lag terms free
_PRIOR: Final = (1e3, 1e-2, 1e2, 1e1, 1e2)
_D: Final = len(_PRIOR)


def _prior() -> list[float]:
    return [_PRIOR[i] if i == j else 0.0 for i in range(_D) for j in range(_D)]


@dataclass(slots=True, frozen=True)
class Kept:
    """An :class:`HbmFit`'s learned part at one moment."""

    w: list[float]
    p: list[float]
    n: int
    armed: bool
    die_lo: float
    die_hi: float
    dram_lo: float
    dram_hi: float


@dataclass(slots=True)
class HbmFit:
    """One GPU's fit of HBM temperature on [1, die temperature, DRAM activity, and each one's
    distance from its exponential mean at ``TAU``]: the HBM heats and cools more slowly than the
    die (its time constant is longer), so while the load moves it lags behind what the same die
    temperature and traffic put it at in the steady state; the lag terms carry that."""

    w: list[float] = field(default_factory=lambda: [0.0, 1.0, 0.0, 0.0, 0.0])
    p: list[float] = field(default_factory=_prior)
    n: int = 0
    armed: bool = False  # whether the fit has followed the GPU within LEARN_C for a minute
    last_ts: float = -1e18
    hot_since: float = -1.0
    residuals: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=32))
    die_mean: float | None = None  # the die's and DRAM activity's exponential means at TAU
    dram_mean: float = 0.0
    means_ts: float = -1e18
    finding: Finding | None = None
    novel_until: float = -1e18  # learning a load not seen before until then
    dram_last: float | None = None  # the last DRAM activity read, and when
    dram_ts: float = -1e18
    die_lo: float = float("inf")  # the range of die temperature and DRAM activity learned from
    die_hi: float = float("-inf")
    dram_lo: float = float("inf")
    dram_hi: float = float("-inf")
    die_fault_ts: float = -1e18  # the last sample whose die was held at its limit (or cooled too little)
    kept: Kept | None = None  # the fit KEEP_S ago or more: what a die fault returns it to
    keeping: Kept | None = None  # the fit at the last snapshot (``kept`` in KEEP_S)
    kept_ts: float = -1e18

    def snapshot(self) -> Kept:
        return Kept(list(self.w), list(self.p), self.n, self.armed, self.die_lo, self.die_hi, self.dram_lo,
                    self.dram_hi)

    def go_back(self, kept: Kept) -> None:
        self.w, self.p, self.n, self.armed = list(kept.w), list(kept.p), kept.n, kept.armed
        self.die_lo, self.die_hi, self.dram_lo, self.dram_hi = kept.die_lo, kept.die_hi, kept.dram_lo, kept.dram_hi

    def restart(self) -> None:
        fresh = HbmFit()
        self.w, self.p, self.n, self.hot_since, self.finding, self.armed = fresh.w, fresh.p, 0, -1.0, None, False
        self.residuals.clear()
        self.die_lo = self.dram_lo = float("inf")
        self.die_hi = self.dram_hi = float("-inf")

    def predict(self, x: tuple[float, ...]) -> float:
        w = self.w
        return w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3] * x[3] + w[4] * x[4]

    def learn(self, x: tuple[float, ...], mem: float) -> None:
        """One step of recursive least squares with forgetting (written out for five terms: the
        engine runs it every ten seconds for every GPU)."""
        p = self.p
        x0, x1, x2, x3, x4 = x
        px = [p[i] * x0 + p[i + 1] * x1 + p[i + 2] * x2 + p[i + 3] * x3 + p[i + 4] * x4 for i in range(0, 25, 5)]
        inv = 1.0 / (FORGET + x0 * px[0] + x1 * px[1] + x2 * px[2] + x3 * px[3] + x4 * px[4])
        k = [v * inv for v in px]
        err = mem - self.predict(x)
        w = self.w
        self.w = [w[0] + k[0] * err, w[1] + k[1] * err, w[2] + k[2] * err, w[3] + k[3] * err, w[4] + k[4] * err]
        if x1 < self.die_lo:
            self.die_lo = x1
        if x1 > self.die_hi:
            self.die_hi = x1
        if x2 < self.dram_lo:
            self.dram_lo = x2
        if x2 > self.dram_hi:
            self.dram_hi = x2
        f = 1.0 / FORGET
        self.p = [(p[5 * i + j] - ki * px[j]) * f for i, ki in enumerate(k) for j in range(5)]
        self.n += 1

    def novel(self, die: float, dram: float) -> bool:
        """Whether this load lies outside what the fit learned from (by ``NEW_DIE_C``, ``NEW_DRAM``)."""
        return self.n > 0 and not (self.die_lo - NEW_DIE_C <= die <= self.die_hi + NEW_DIE_C
                                   and self.dram_lo - NEW_DRAM <= dram <= self.dram_hi + NEW_DRAM)

    def regressors(self, ts: float, die: float, dram: float) -> tuple[float, ...]:
        if self.die_mean is None:
            self.die_mean, self.dram_mean = die, dram
        a = 1.0 - math.exp(-max(0.0, ts - self.means_ts) / TAU)
        self.means_ts = ts
        self.die_mean += a * (die - self.die_mean)
        self.dram_mean += a * (dram - self.dram_mean)
        return (1.0, die, dram, die - self.die_mean, dram - self.dram_mean)


def observe(st: GpuState, ts: float, mem: float | None) -> Finding | None:
    """Fold a sample in every ``EVERY`` seconds; the finding while HBM runs ``HOT_C`` over the fit's
    prediction for a minute (repeated between samples)."""
    fit, die, dram = st.hbm, st.temp, st.dram
    if ts - fit.last_ts < EVERY:
        return fit.finding
    fit.last_ts = ts
    if mem is None or die is None:
        fit.finding = None
        return None
    if dram is not None:
        fit.dram_last, fit.dram_ts = dram, ts
    elif fit.dram_last is not None:
        # a sample without DRAM activity (profiling read less often than temperatures, or the first
        # sample after a gap) is no sample without traffic: read as zero, a memory-bound job's HBM
        # was 10 °C "hot" for the one sample after an 87-s gap (an independently written fleet).
        # The last reading stands for a while; past that the fit cannot say what the HBM should be,
        # and says nothing. Gone for RELEARN_S (profiling turned off), the GPU is one without the
        # reading, and its fit starts again without it
        if ts - fit.dram_ts > RELEARN_S:
            fit.restart()
            fit.dram_last = None
        elif ts - fit.dram_ts > DRAM_STALE_S:
            fit.finding = None
            return None
        else:
            dram = fit.dram_last
    d = dram or 0.0  # (never read at all: a GPU without the reading, whose fit has no DRAM term to use)
    x = fit.regressors(ts, die, d)
    if _die_fault(st, fit, ts):
        return None
    frozen = ts - fit.die_fault_ts < DIE_FAULT_HOLD_S
    res = mem - fit.predict(x)
    fit.residuals.append((ts, res))
    while fit.residuals and ts - fit.residuals[0][0] > WINDOW_S:
        fit.residuals.popleft()
    mean = sum(r for _, r in fit.residuals) / len(fit.residuals)
    full = len(fit.residuals) >= WINDOW_S / EVERY / 2
    if frozen:
        # after a die fault: the fit from before it judges, and learns nothing (the fault may go on
        # while the GPU idles, its die hotter than its power puts it, and nothing flags that)
        if not fit.armed or fit.novel(die, d) or ts < fit.novel_until:
            fit.hot_since, fit.finding = -1.0, None
            return None
        return _judge(st, fit, ts, mem, res, mean, full, die, d)
    if ts - fit.kept_ts >= KEEP_S:
        fit.kept, fit.keeping, fit.kept_ts = fit.keeping, fit.snapshot(), ts
    if fit.novel(die, d):
        fit.novel_until = ts + NEW_LEARN_S
    if ts < fit.novel_until:
        # a load the fit never learned from (a memory-bound phase on a GPU that only ever ran lighter
        # work) is extrapolated, and the fit's slopes are not the GPU's there: it is learned for
        # NEW_LEARN_S (the HBM settling at it too), not judged (an independently written fleet's GPUs
        # idle for 20 minutes, then a batch at DRAM activity 0.25, then one at 0.87: 8 °C "hot"); and
        # then until it follows the GPU again, as a fit does at its start: HBM still settling when
        # NEW_LEARN_S ended left a fit 3 °C low, which then learned nothing more (a sample that far
        # above it is an excursion) and called a batch job's steady HBM 12 °C hot 15 minutes later
        fit.learn(x, mem)
        fit.hot_since, fit.finding, fit.armed = -1.0, None, False
        return None
    if not fit.armed:
        # a fit begun in one phase is wrong in the next for a while (learned on a job's warm-up, whose
        # die heats faster than its HBM, it was 27 °C off once the job settled): it learns every sample
        # for its first WARM, and until it has followed the GPU within LEARN_C for a minute
        fit.learn(x, mem)
        fit.armed = fit.n >= WARM and full and abs(mean) < LEARN_C
        return None
    if res < LEARN_C:
        fit.learn(x, max(mem, fit.predict(x) - LEARN_C))  # (a transient below it, clipped)
    return _judge(st, fit, ts, mem, res, mean, full, die, d)


def _die_fault(st: GpuState, fit: HbmFit, ts: float) -> bool:
    """Whether the die is held at its thermal limit or its cooling is failing (a thermal_throttle
    open): its temperature no longer stands for the board's heat, so the HBM is not judged against
    it, and the fit goes back to what it was before the fault began.

    Why back: a cooling fault heats the die before the driver holds its clocks, and between the
    holds (the GPU idle, its die hotter than its power puts it, nothing flagged); an independently
    written fleet's faults taught fits, in the minute before each hold and in idle minutes between,
    that memory traffic cools HBM (a DRAM weight of -12), and on eleven GPUs the healthy work after
    such a fault was "8-20 °C hot" for up to an hour: 23 of the 25 false HBM findings on four sets
    of its traces (docs/benchmarks.md, round 27)."""
    if not (st.reasons & THERMAL or "thermal_throttle" in st.open):
        return False
    if ts - fit.die_fault_ts >= DIE_FAULT_HOLD_S and fit.kept is not None:
        fit.go_back(fit.kept)
        fit.keeping = fit.kept
    fit.die_fault_ts = ts
    fit.hot_since, fit.finding = -1.0, None
    fit.residuals.clear()
    return True


def _judge(st: GpuState, fit: HbmFit, ts: float, mem: float, res: float, mean: float, full: bool,
           die: float, d: float) -> Finding | None:
    if mean < HOT_C or not full:
        fit.hot_since = -1.0
        fit.finding = None
        return None
    if fit.hot_since < 0:
        fit.hot_since = ts
    elif ts - fit.hot_since >= RELEARN_S:
        fit.restart()  # hot for half an hour: this GPU's new normal, learned afresh
        return None
    expected = mem - mean
    causes = [f"HBM {mem:.0f} °C where its die at {die:.0f} °C and DRAM activity {d:.2f} put it at about "
              f"{expected:.0f} °C: {mean:.1f} °C hotter over the last minute",
              f"fitted on this GPU's own samples (HBM = {fit.w[0]:.1f} + {fit.w[1]:.2f} x die + "
              f"{fit.w[2]:.1f} x DRAM activity, and how far each is from its own last minutes); real GPUs "
              "stay within 3 °C of such a fit",
              "the HBM stacks' own cooling (cold-plate contact, a pump or fan on that side) or a degrading stack"]
    fit.finding = Finding(KIND, "warning", MEMORY_TEMP, f"{st.where()}: HBM runs {mean:.0f} °C hotter than its die "
                          f"and memory traffic explain ({mem:.0f} °C)", causes, 0.0)
    return fit.finding
