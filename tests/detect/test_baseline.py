"""The robust baseline (clocks, temperatures) resists outliers and irregular sampling."""

from __future__ import annotations

from collector.detect.baseline import RobustBaseline


def test_a_spike_barely_moves_the_level() -> None:
    b = RobustBaseline(600.0)
    for t in range(600):
        b.update(float(t), 0.9 + (0.01 if t % 2 else -0.01))
    before = b.level
    for t in range(600, 610):
        b.update(float(t), 50.0)
    assert abs(b.level - before) < 0.05
    assert b.spread < 0.1


def test_irregular_sampling_does_not_change_memory() -> None:
    dense, sparse = RobustBaseline(300.0), RobustBaseline(300.0)
    for t in range(0, 3000):
        dense.update(float(t), 1.0 if t < 1500 else 2.0)
    for t in range(0, 3000, 10):
        sparse.update(float(t), 1.0 if t < 1500 else 2.0)
    assert abs(dense.level - sparse.level) < 0.1
