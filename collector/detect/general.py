"""The general-purpose detector in the engine: metrics no specific detector covers.

Why: power, memory temperature and memory bandwidth (and inference latencies, once the
agent reports them) can go wrong in ways nobody wrote a detector for: HBM running hotter
than it ever did under the same job, power far outside what the job draws. The
:class:`~collector.detect.univariate.UnivariateDetector` (the one benchmarked on NAB)
judges a series by what it has seen of it; here it runs per GPU and per metric on
one-minute means (NAB's series are minutes apart too, and a minute smooths the sampling
interval away), with the metric's physical range for its bins.

What keeps it quiet where that knowledge is not news:

* each workload (process set) is its own series: a new job draws other power, and the
  detector learns it afresh (``probation_s`` of it first);
* by default it sees only the samples of a steady workload at its working level
  (``at_plateau``): power, temperatures and bandwidth follow the load, so a checkpoint or a
  quiet hour would otherwise be "never seen"; at the same load, HBM 15 °C hotter than ever,
  or power far from what the same work drew, is news;
* while any other anomaly is open on the GPU, and for ``QUIET_AFTER_S`` after, it neither
  says nor learns anything: a throttle or a leak explains what the metric does, says it
  better, and what the metric does then is not its normal;
* it reports an onset only when the detector's score reaches ``threshold`` and the value
  lies at least ``min_change`` outside the range this workload showed until ``RANGE_LAG_S``
  ago (a 0.5 °C "never seen" is statistics, not news, and a slow creep is judged against
  where it began), on the side its ``direction`` names (power, temperatures and latencies only
  above it: below it they are no fault, finding.py says why);
* between minutes, the last minute of samples (a sliding minute) is asked only the part of the
  score that needs no context, how far beyond everything seen it lies: an excursion that is
  already far outside is reported then, not when its first whole minute closes (:func:`_sliding`);
* while its own anomaly is open (up to ``LEARN_AFTER_S``) each minute is judged but not
  learned: HBM that ran hot for 15 minutes is not the series' normal, so the next time it
  runs that hot is news again, and the anomaly lasts as long as the excursion does.

Each metric is configured by a :class:`MetricSpec` (the ``detectors: metrics:`` section of
the alert rules file; :data:`~collector.detect.finding.DEFAULT_METRICS` without one).
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Final

from collector.detect.anomaly import AnomalyKind
from collector.detect.finding import Finding, MetricSpec
from collector.detect.level import PLATEAU
from collector.detect.state import GpuState
from collector.detect.univariate import UnivariateDetector
from telemetry.catalog import BY_KEY
from telemetry.keys import short_name

QUIET_AFTER_S = 600.0
RANGE_LAG_S = 600.0  # a minute joins the range of what was seen this long after it
LEARN_AFTER_S = 1800.0  # an excursion reported this long is the series' new normal: learned from then on
KIND: Final[AnomalyKind] = "metric_anomaly"
EVERY = 5.0  # seconds between samples folded into a minute's mean (plenty for a mean, and cheap)


class Watch:
    """One metric of one GPU's workload: the current minute's sum and the detector."""

    __slots__ = ("det", "high", "low", "n", "pending", "recent", "spec", "start", "total")

    def __init__(self, spec: MetricSpec, ts: float) -> None:
        self.spec = spec
        self.start = ts
        self.total = 0.0
        self.n = 0
        probation = max(10, int(spec.probation_s / spec.every_s))
        self.det = UnivariateDetector(spec.lo, spec.hi, probation)
        self.low = float("inf")
        self.high = float("-inf")
        self.pending: deque[tuple[float, float]] = deque()  # (ts, minute mean) not yet in the range
        self.recent: deque[float] = deque(maxlen=max(2, round(spec.every_s / EVERY)))  # a sliding minute

    def widen(self, ts: float, mean: float) -> None:
        """Fold a normal minute into the range seen, ``RANGE_LAG_S`` later: a value that creeps up
        over minutes, each minute only a little above the last, is judged against where the
        series was before it began, not against its own way up."""
        self.pending.append((ts, mean))
        while self.pending and ts - self.pending[0][0] >= RANGE_LAG_S:
            _, m = self.pending.popleft()
            self.low, self.high = min(self.low, m), max(self.high, m)


def observe(st: GpuState, ts: float, metrics: dict[str, float], specs: tuple[MetricSpec, ...]) -> Finding | None:
    """Fold this sample in; a finding when a minute closes with a score at or above its threshold.
    The engine calls it once every ``EVERY`` seconds per GPU."""
    st.watch_ts = ts
    watches = st.watches
    if st.open and any(k != KIND for k in st.open):
        st.other_ts = ts
    if ts - st.other_ts < QUIET_AFTER_S:
        return None  # another anomaly explains the metrics now, and what they do then is not normal
    lv = st.level
    floor = PLATEAU * lv.level
    working = lv.steady is True and lv.fast >= floor and (st.sm or 0.0) >= floor
    found: Finding | None = None
    own = st.open.get(KIND)
    for spec in specs:
        if spec.at_plateau and not working:
            continue
        value = metrics.get(spec.metric)
        if value is None:
            continue
        w = watches.get(spec.metric)
        if w is None:
            w = watches[spec.metric] = Watch(spec, ts)
        if ts - w.start >= spec.every_s and w.n:
            mean = w.total / w.n
            w.start, w.total, w.n = ts, 0.0, 0
            if own is not None and ts - own[0].start < LEARN_AFTER_S:
                probe = copy.deepcopy(w.det)  # judged, not learned: the excursion is not the series' normal
                probe.update(mean)
                score = probe.raw
            else:
                w.det.update(mean)
                score = w.det.raw  # the engine's hysteresis makes one anomaly of a run of high scores
            seen = (w.low, w.high)
            if score >= spec.threshold and _outside(spec, mean, w) and found is None:
                found = _finding(st, spec, mean, score, seen)
            if score < spec.threshold and own is None:  # the range of what was normal: an excursion
                w.widen(ts, mean)  # (or what is judged while one is open) does not widen it
        w.total += value
        w.n += 1
        w.recent.append(value)  # (always: after an excursion, the sliding minute holds what followed it)
        if own is None and found is None:
            found = _sliding(st, w)
    return found


def _outside(spec: MetricSpec, mean: float, w: Watch) -> bool:
    """Whether ``mean`` lies ``min_change`` beyond the range seen, on a side that is news (``direction``)."""
    if mean > w.high + spec.min_change:
        return spec.direction != "down"
    return mean < w.low - spec.min_change and spec.direction != "up"


def _sliding(st: GpuState, w: Watch) -> Finding | None:
    """A finding when the last minute of samples, wherever the minute's boundaries fall, is
    already far beyond everything this workload showed: its novelty alone (the score's part that
    needs no context) reaches the threshold and it lies ``min_change`` outside the range.

    Why: a minute's mean is judged when the minute closes, so an excursion that crossed the line
    early in a minute waited for its end, and the mean of a minute that began before it lagged
    behind (the generated suites' HBM heating was reported 33-77 s after it was 7 °C over).
    Judged, not learned: the detector still learns whole minutes only."""
    recent = w.recent
    if len(recent) < (recent.maxlen or 0):
        return None
    spec = w.spec
    mean = sum(recent) / len(recent)
    if not _outside(spec, mean, w):
        return None
    score = w.det.novelty(mean)
    return _finding(st, spec, mean, score, (w.low, w.high)) if score >= spec.threshold else None


def _finding(st: GpuState, spec: MetricSpec, mean: float, score: float, seen: tuple[float, float]) -> Finding:
    known = BY_KEY.get(spec.metric)
    unit = f" {known.unit}" if known is not None and known.unit not in ("ratio", "") else ""
    name = short_name(spec.metric)
    where = " at its working level" if spec.at_plateau else ""
    causes = [f"{name} {spec.every_s / 60:.0f}-minute mean {mean:.3g}{unit}; this workload's so far{where} "
              f"{seen[0]:.3g}-{seen[1]:.3g}{unit}",
              f"score {score:.2f} of the general-purpose detector (a value, or a sequence of values, this "
              f"series has not been in before)",
              "no specific detector explains it (none is open on this GPU)"]
    summary = f"{st.where()}: {name} behaves unlike before ({mean:.3g}{unit})"
    return Finding(KIND, "info", spec.metric, summary, causes, 0.0)
