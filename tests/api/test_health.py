"""The one definition of a GPU's health (open anomalies by severity, and sample age)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from collector.api.health import OpenAnomaly, age_text, judge

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
LIMIT = timedelta(seconds=60)
CRIT = OpenAnomaly("critical", "gpu_lost", "GPU 3 is lost")
WARN = OpenAnomaly("warning", "thermal_throttle", "GPU 3 throttles")
INFO = OpenAnomaly("info", "idle_allocated", "GPU 3 idles")


def test_severity_and_age_decide() -> None:
    fresh, old = NOW - timedelta(seconds=5), NOW - timedelta(minutes=5)
    assert judge(fresh, [], NOW, LIMIT).health == "ok"
    assert judge(fresh, [INFO], NOW, LIMIT).health == "ok"
    assert judge(fresh, [INFO, WARN], NOW, LIMIT).health == "degraded"
    assert judge(fresh, [WARN, CRIT], NOW, LIMIT).reasons[0] == "critical gpu_lost: GPU 3 is lost"
    stale = judge(old, [WARN], NOW, LIMIT)
    assert stale.health == "stale" and stale.reasons[-1] == "newest sample is 5 min old"
    assert stale.sample_age_seconds == 300
    assert judge(old, [CRIT], NOW, LIMIT).health == "critical"  # a lost GPU is critical, not just stale
    assert judge(None, [], NOW, LIMIT).health == "no_data"
    assert judge(NOW + timedelta(seconds=3), [], NOW, LIMIT).sample_age_seconds == 0  # clock skew


def test_age_text() -> None:
    assert [age_text(s) for s in (None, 42, 300, 3 * 3600, 3 * 86400)] == ["never", "42 s", "5 min", "3 h", "3 days"]
    assert age_text(42, compact=True) == "42s" and age_text(300, compact=True) == "5m"
