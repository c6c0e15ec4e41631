"""The router on fake time: for-duration, grouping, dedup, repeat, resolve, silences, severity routing."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from collector.alerting.router import Router
from collector.alerting.rules import parse_rules
from collector.alerting.silences import Silence
from collector.detect import Anomaly, Change

RULES = """\
channels:
  am: {type: alertmanager, url: "http://127.0.0.1:1"}
  pd: {type: pagerduty, url: "http://127.0.0.1:1", routing_key_file: %s}
rules:
  - name: perf
    kinds: [thermal_throttle]
    for: 60s
    group_by: [service]
    group_interval: 10s
    repeat_interval: 1h
    channels: [am]
    severity_channels: {critical: [pd]}
"""


def router(tmp_path) -> Router:  # type: ignore[no-untyped-def]
    key = tmp_path / "key"
    key.write_text("k" * 32)
    rs = parse_rules(RULES % key, "r.yaml")
    assert rs.errors == []
    return Router(rs)


def anomaly(gpu: str, start: float, severity: str = "warning") -> Anomaly:
    return Anomaly("thermal_throttle", severity, "n0", gpu, "DCGM_FI_DEV_GPU_TEMP", start,  # type: ignore[arg-type]
                   f"{gpu} hot", ["HW_THERMAL"], service="svc", namespace="ns")


def test_for_duration_grouping_dedup_repeat_and_resolve(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = router(tmp_path)
    a, b = anomaly("g0", 100.0), anomaly("g1", 105.0)
    r.on_change(Change("open", a), 100.0)
    assert r.tick(150.0) == ([], [])  # pending: 'for' is 60 s
    r.on_change(Change("open", b), 105.0)
    changed, notes = r.tick(160.0)
    assert [x.anomaly.gpu for x in changed] == ["g0"]
    assert len(notes) == 1 and notes[0].channel == "am"
    assert [dict(v.labels)["gpu"] for v in notes[0].alerts] == ["g0"]
    changed, notes = r.tick(166.0)  # g1 fires, but group_interval (10 s) holds the group back
    assert [x.anomaly.gpu for x in changed] == ["g1"] and notes == []
    _, notes = r.tick(171.0)
    assert [dict(v.labels)["gpu"] for v in notes[0].alerts] == ["g0", "g1"]  # one notification, both alerts
    assert notes[0].seq == 2
    assert r.tick(500.0) == ([], [])  # nothing changed: no duplicate
    _, notes = r.tick(171.0 + 3600)
    assert len(notes) == 1 and notes[0].seq == 3  # repeat interval
    a = replace(a, end=4000.0)
    r.on_change(Change("close", a), 4000.0)
    changed, notes = r.tick(4000.0 + 3)
    assert [(x.anomaly.gpu, x.status) for x in changed] == [("g0", "resolved")]
    statuses = {dict(v.labels)["gpu"]: v.status for v in notes[0].alerts}
    assert statuses == {"g0": "resolved", "g1": "firing"}
    assert r.tick(4000.0 + 30) == ([], [])  # the resolve went out once


def test_an_anomaly_closed_while_pending_never_notifies(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = router(tmp_path)
    a = anomaly("g0", 100.0)
    r.on_change(Change("open", a), 100.0)
    a = replace(a, end=130.0)
    r.on_change(Change("close", a), 130.0)
    assert r.tick(200.0) == ([], []) and r.groups == {}


def test_severity_routing_and_stable_fingerprints(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = router(tmp_path)
    r.on_change(Change("open", anomaly("g0", 0.0, "critical")), 0.0)
    _, notes = r.tick(60.0)
    assert sorted(n.channel for n in notes) == ["am", "pd"]
    assert len({n.alerts[0].fingerprint for n in notes}) == 1
    r2 = router(tmp_path)
    r2.on_change(Change("open", anomaly("g0", 999.0, "critical")), 999.0)
    _, notes2 = r2.tick(2000.0)
    assert notes2[0].alerts[0].fingerprint == notes[0].alerts[0].fingerprint  # same series, same PD dedup_key


def test_silenced_alerts_are_not_notified(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = router(tmp_path)
    r.on_change(Change("open", anomaly("g0", 0.0)), 0.0)
    r.on_change(Change("open", anomaly("g1", 0.0)), 0.0)
    silence = Silence(7, (("gpu", "g1"), ("service", "svc")), 0.0, 1000.0)
    changed, notes = r.tick(60.0, [silence])
    assert {(x.anomaly.gpu, x.silenced_by) for x in changed} == {("g0", None), ("g1", 7)}
    assert [dict(v.labels)["gpu"] for v in notes[0].alerts] == ["g0"]
    _, notes = r.tick(1000.0 + 20, [silence])  # the silence ended: g1 is news
    assert sorted(dict(v.labels)["gpu"] for v in notes[0].alerts) == ["g0", "g1"]
    assert not Silence(1, (), 0.0, 10.0).matches({"gpu": "g0"})  # an empty silence mutes nothing


def test_an_anomaly_is_followed_by_its_key_not_by_its_object(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The engine reports an update or a close as a new Anomaly (they are frozen); the router
    finds the alerts by fingerprint and start, and they carry the anomaly as it is now."""
    r = router(tmp_path)
    a = anomaly("g0", 0.0)
    r.on_change(Change("open", a), 0.0)
    changed, notes = r.tick(60.0)
    assert [n.channel for n in notes] == ["am"]  # a warning: not paged
    hotter = replace(a, severity="critical", summary="g0 very hot")
    r.on_change(Change("update", hotter), 70.0)
    changed, _ = r.tick(70.0)
    assert [(x.anomaly.summary, x.labels["severity"], x.severity) for x in changed] == [
        ("g0 very hot", "critical", "critical")]
    assert a.severity == "warning" and a.summary == "g0 hot"  # what was reported before stays as it was
    r.on_change(Change("close", replace(hotter, end=90.0)), 90.0)
    changed, notes = r.tick(100.0)
    assert [(x.status, x.ends_at, x.anomaly.end) for x in changed] == [("resolved", 90.0, 90.0)]
    assert {n.alerts[0].status for n in notes} == {"resolved"} and r.groups == {}
    stranger = replace(a, start=5.0, end=6.0)  # same series, another start: not this alert's anomaly
    r.on_change(Change("open", a), 200.0)
    r.on_change(Change("close", stranger), 210.0)
    changed, _ = r.tick(260.0)
    assert [(x.status, x.anomaly.start) for x in changed] == [("firing", 0.0)]


def test_alerts_and_anomalies_are_frozen(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = router(tmp_path)
    a = anomaly("g0", 0.0)
    r.on_change(Change("open", a), 0.0)
    changed, _ = r.tick(60.0)
    with pytest.raises(FrozenInstanceError):
        a.end = 1.0  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        changed[0].status = "resolved"  # type: ignore[misc]
