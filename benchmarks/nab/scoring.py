"""NAB scoring (Numenta Anomaly Benchmark v1.1), reimplemented from its published rules.

Why our own: NAB's code is Python 2-era and pulls in pandas; the rules are short
(numenta/NAB ``nab/sweeper.py``, ``nab/labeler.py``, ``config/profiles.json``):

* windows (given in ``labels/combined_windows.json``; :func:`windows_from_labels` rebuilds
  them): 10% of the file's rows in total, split evenly among its labels, centred on each;
* a detection at relative position ``y`` in its window (-1 at the left edge, 0 at the right)
  scores ``tp_weight · scaled_sigmoid(y) / scaled_sigmoid(-1)``, ``scaled_sigmoid(y) =
  2·sigmoid(-5y) - 1``; only the best, i.e. the earliest, detection in a window counts;
* a detection outside every window is a false positive weighted ``fp_weight`` times the
  sigmoid of its distance past the previous window in that window's widths (-1 with no
  previous window, and -1 from three widths on); each such row counts;
* each window without a detection costs ``fn_weight``;
* rows of the probationary period (15% of the file, at most 750 rows) are not scored;
* one threshold for the whole corpus, chosen by a sweep to maximise the profile's score;
* normalised: ``100 · (raw - null) / (perfect - null)``, null = never detecting
  (``-fn_weight`` per window), perfect = each window detected at its left edge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    tp: float
    fp: float
    fn: float


PROFILES = (
    Profile("standard", 1.0, 0.11, 1.0),
    Profile("reward_low_FP_rate", 1.0, 0.22, 1.0),
    Profile("reward_low_FN_rate", 1.0, 0.11, 2.0),
)


def scaled_sigmoid(y: float) -> float:
    if y > 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


MAX_TP = scaled_sigmoid(-1.0)


def probation_rows(rows: int, percent: float = 0.15) -> int:
    return int(min(math.floor(percent * rows), percent * 5000))


def windows_from_labels(timestamps: Sequence[str], labels: Sequence[str], size: float = 0.10) -> list[tuple[str, str]]:
    """NAB's labeler: a window of ``size·rows/len(labels)`` rows centred on each label, overlaps merged."""
    if not labels:
        return []
    n = len(timestamps)
    half = int(size * n / len(labels)) // 2
    index = {t: i for i, t in enumerate(timestamps)}
    spans: list[list[int]] = []
    for label in labels:
        i = index[label]
        left, right = max(0, i - half), min(n - 1, i + half)
        if spans and left <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], right)
        else:
            spans.append([left, right])
    return [(timestamps[a], timestamps[b]) for a, b in spans]


@dataclass(frozen=True, slots=True)
class Point:
    """One scorable row: its anomaly score, its window (or -1) and its unweighted scores."""

    score: float
    window: int  # corpus-wide window id, -1 outside every window
    weight: float  # scaled sigmoid: TP value inside a window, FP value (negative) outside


def file_points(timestamps: Sequence[str], scores: Sequence[float], windows: Sequence[tuple[str, str]],
                first_window_id: int) -> tuple[list[Point], int]:
    """The scorable rows of one file, and how many windows count (those with a scorable row)."""
    n = len(timestamps)
    probation = probation_rows(n)
    index = {t: i for i, t in enumerate(timestamps)}
    spans = [(index[a], index[b]) for a, b in windows]
    points: list[Point] = []
    counted: set[int] = set()
    w = 0
    prev: tuple[int, int] | None = None
    for i in range(n):
        while w < len(spans) and i > spans[w][1]:
            prev = spans[w]
            w += 1
        inside = w < len(spans) and spans[w][0] <= i <= spans[w][1]
        if inside:
            left, right = spans[w]
            width = float(right - left + 1)
            weight = scaled_sigmoid(-(right - i + 1) / width)
            window = first_window_id + w
        else:
            if prev is None:
                weight = -1.0
            else:
                width = float(prev[1] - prev[0] + 1)
                weight = scaled_sigmoid(abs(prev[1] - i) / (width - 1)) if width > 1 else -1.0
            window = -1
        if i < probation:
            continue
        if window >= 0:
            counted.add(window)
        points.append(Point(scores[i], window, weight))
    return points, len(counted)


@dataclass(frozen=True, slots=True)
class Result:
    profile: str
    threshold: float
    raw: float
    null: float
    perfect: float
    tp: int
    fp: int
    fn: int

    @property
    def score(self) -> float:
        return 100.0 * (self.raw - self.null) / (self.perfect - self.null)


def curve(points: Sequence[Point], windows: int, profile: Profile) -> tuple[list[float], list[Result]]:
    """The profile's result at every distinct score used as the threshold, highest threshold first
    (NAB's optimiser's search space, walked exactly by one sort): the thresholds and their results."""
    order = sorted(points, key=lambda p: -p.score)
    best_in: dict[int, float] = {}
    tp_score = fp_score = 0.0
    fp_rows = 0
    null = -profile.fn * windows
    thresholds: list[float] = []
    results: list[Result] = []
    i = 0
    while i < len(order):
        threshold = order[i].score
        while i < len(order) and order[i].score == threshold:
            p = order[i]
            if p.window >= 0:
                value = p.weight * profile.tp / MAX_TP
                old = best_in.get(p.window)
                if old is None:
                    best_in[p.window] = value
                    tp_score += value
                elif value > old:
                    best_in[p.window] = value
                    tp_score += value - old
            else:
                fp_score += p.weight * profile.fp
                fp_rows += 1
            i += 1
        raw = tp_score + fp_score - profile.fn * (windows - len(best_in))
        thresholds.append(threshold)
        results.append(Result(profile.name, threshold, raw, null, profile.tp * windows, len(best_in), fp_rows,
                              windows - len(best_in)))
    return thresholds, results


def sweep(points: Sequence[Point], windows: int, profile: Profile) -> Result:
    """The best corpus-wide threshold for ``profile`` (NAB's optimiser, done exactly by one sort)."""
    null = -profile.fn * windows
    best = Result(profile.name, math.inf, null, null, profile.tp * windows, 0, 0, windows)
    for r in curve(points, windows, profile)[1]:
        if r.raw > best.raw:
            best = r
    return best


def score_at(points: Sequence[Point], windows: int, profile: Profile, threshold: float) -> Result:
    """The profile's score at a fixed threshold (detections are rows with score >= threshold)."""
    best_in: dict[int, float] = {}
    fp_score, fp_rows = 0.0, 0
    for p in points:
        if p.score < threshold:
            continue
        if p.window >= 0:
            best_in[p.window] = max(best_in.get(p.window, -math.inf), p.weight * profile.tp / MAX_TP)
        else:
            fp_score += p.weight * profile.fp
            fp_rows += 1
    raw = sum(best_in.values()) + fp_score - profile.fn * (windows - len(best_in))
    return Result(profile.name, threshold, raw, -profile.fn * windows, profile.tp * windows, len(best_in), fp_rows,
                  windows - len(best_in))
