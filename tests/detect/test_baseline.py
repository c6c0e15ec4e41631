"""The robust baseline resists outliers; the seasonal one uses an hour's history once it has it."""

from __future__ import annotations

from collector.detect.baseline import RobustBaseline, SeasonalBaseline


def test_a_spike_barely_moves_the_level() -> None:
    b = RobustBaseline(600.0)
    for t in range(600):
        b.update(float(t), 0.9 + (0.01 if t % 2 else -0.01))
    before = b.level
    for t in range(600, 610):
        b.update(float(t), 50.0)
    assert abs(b.level - before) < 0.05
    assert b.zscore(0.5, floor=0.01) < -10


def test_irregular_sampling_does_not_change_memory() -> None:
    dense, sparse = RobustBaseline(300.0), RobustBaseline(300.0)
    for t in range(0, 3000):
        dense.update(float(t), 1.0 if t < 1500 else 2.0)
    for t in range(0, 3000, 10):
        sparse.update(float(t), 1.0 if t < 1500 else 2.0)
    assert abs(dense.level - sparse.level) < 0.1


def test_daily_seasonality_after_two_days() -> None:
    s = SeasonalBaseline(1800.0, min_samples=30)
    day = 86400
    for d in range(3):
        for t in range(0, day, 10):
            busy = 9 * 3600 <= t < 17 * 3600
            s.update(float(d * day + t), 0.9 if busy else 0.1)
    night, noon = s.current(3 * day + 3 * 3600.0), s.current(3 * day + 12 * 3600.0)
    assert night is not s.global_ and noon is not s.global_
    assert night.level < 0.2 and noon.level > 0.8
