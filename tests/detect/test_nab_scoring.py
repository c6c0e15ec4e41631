"""NAB's scoring rules on a tiny hand-computed file, and the univariate detector's basics."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.nab.scoring import PROFILES, file_points, probation_rows, scaled_sigmoid, score_at, sweep
from benchmarks.nab.scoring import windows_from_labels as windows
from collector.detect.univariate import UnivariateDetector

STANDARD, LOW_FP, LOW_FN = PROFILES


def test_sigmoid_and_probation() -> None:
    assert scaled_sigmoid(-1.0) == pytest.approx(0.986614, abs=1e-6)
    assert scaled_sigmoid(0.0) == 0.0 and scaled_sigmoid(3.5) == -1.0
    assert probation_rows(100) == 15 and probation_rows(4032) == 604 and probation_rows(22695) == 750


def test_a_hand_computed_file() -> None:
    stamps = [f"t{i:03d}" for i in range(100)]
    spans = [("t040", "t049")]  # one window of 10 rows
    scores = [0.0] * 100
    for i in (10, 20, 45, 47, 60):  # 10: probation; 20: FP before the window; 45: TP; 47: ignored; 60: FP after
        scores[i] = 1.0
    points, counted = file_points(stamps, scores, spans, 0)
    assert counted == 1 and len(points) == 85
    tp = (2 / (1 + math.exp(-2.5)) - 1) / scaled_sigmoid(-1.0)  # position -(49-45+1)/10 = -0.5
    fp_after = 2 / (1 + math.exp(5 * 11 / 9)) - 1  # 11 rows past the window's right edge, width 10 -> 11/9
    assert tp == pytest.approx(0.859792, abs=1e-6)
    raw = tp - 0.11 + 0.11 * fp_after
    result = score_at(points, 1, STANDARD, 1.0)
    assert (result.tp, result.fp, result.fn) == (1, 2, 0)
    assert result.raw == pytest.approx(raw)
    assert result.score == pytest.approx(100 * (raw + 1) / 2)  # null -1, perfect +1
    assert sweep(points, 1, STANDARD).raw == pytest.approx(raw)
    assert score_at(points, 1, LOW_FN, 2.0).score == 0.0  # nothing detected = the null detector
    assert score_at(points, 1, LOW_FP, 1.0).raw == pytest.approx(tp - 0.22 + 0.22 * fp_after)


def test_the_earliest_detection_in_a_window_counts_and_perfect_is_100() -> None:
    stamps = [f"t{i:03d}" for i in range(200)]
    spans = windows(stamps, ["t100"])  # 10% of 200 rows around the label
    assert spans == [("t090", "t110")]
    scores = [0.0] * 200
    scores[90], scores[105] = 0.5, 0.9  # the earlier, weaker detection wins once both are over threshold
    points, _ = file_points(stamps, scores, spans, 0)
    assert sweep(points, 1, STANDARD).score == pytest.approx(100.0)


def test_univariate_detector_flags_the_onset_of_a_level_shift_once() -> None:
    values = [10.0 + (i % 7) for i in range(1000)] + [40.0 + (i % 7) for i in range(200)]
    det = UnivariateDetector(min(values), max(values), probation_rows(len(values)))
    scores = [det.update(v) for v in values]
    assert max(scores[:1000]) < 0.5
    assert scores[1000] > 0.9
    assert sum(1 for s in scores[1001:] if s > 0.5) <= 1


def test_univariate_detector_flags_a_rhythm_that_stops_although_every_value_was_seen() -> None:
    # a noisy wave, then the same noise around its middle: each value, pair and triple of
    # values was seen at the wave's crossings; only the slow (block-mean) contexts are new
    rng = random.Random(5)
    values = [10 * math.sin(2 * math.pi * i / 64) + rng.gauss(0, 0.5) for i in range(2000)]
    values += [rng.gauss(0, 0.5) for _ in range(200)]
    det = UnivariateDetector(min(values), max(values), probation_rows(len(values)))
    scores = [det.update(v) for v in values]
    assert max(scores[2000:2016]) > max(scores[1000:2000]) + 0.1


def test_univariate_detector_reports_a_larger_spike_right_after_a_spike() -> None:
    # both spikes score the capped 1.0; the onset rule sees the second go far beyond the first
    rng = random.Random(3)
    values = [10.0 + rng.gauss(0, 1) for _ in range(1500)]
    values[1200], values[1230] = 30.0, 90.0
    det = UnivariateDetector(0.0, 100.0, probation_rows(len(values)))
    scores = [det.update(v) for v in values]
    assert det.refractory > 30
    assert scores[1200] == 1.0 and scores[1230] == 1.0



def test_univariate_detector_a_block_mean_creeping_past_its_range_is_not_a_new_context() -> None:
    # blocks of 8 whose means alternate 46 and 54 (bins 11 and 12 of 24 over 0-100); one block's
    # mean reaches 54.4, a new bin (13) but only 5% beyond the block means' range, every value
    # and pair of values in it seen before: scored as that much range novelty, not as a new bin
    values: list[float] = []
    for k in range(200):
        m = 54.4 if k == 181 else (46.0 if k % 2 == 0 else 54.0)
        values += [m - 3.0, m + 3.0] * 4
    det = UnivariateDetector(0.0, 100.0, probation_rows(len(values)), blocks=(8,))
    scores = [det.update(v) for v in values]
    assert max(scores[181 * 8:183 * 8]) < 0.8
