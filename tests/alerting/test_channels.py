"""Every channel's payload passes its published schema at a local receiver; retries follow
the policy (429/5xx again with backoff, other 4xx never); a secret URL is never in an error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from collector.alerting.delivery import RetryPolicy, UrllibTransport, send
from collector.alerting.payloads import bodies
from collector.alerting.router import Notification, Router
from collector.alerting.rules import Channel, RuleSet, parse_rules
from collector.detect import Anomaly, Change
from tests.alerting.conftest import Receiver

FAST = RetryPolicy(attempts=4, base_s=0.01, cap_s=0.05)


def ruleset(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RuleSet:
    (tmp_path / "pd-key").write_text("R" * 32)
    monkeypatch.setenv("TEST_SLACK_URL", receiver.url("/slack"))
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url("/hook"))
    text = f"""\
channels:
  slack: {{type: slack, url_env: TEST_SLACK_URL}}
  pd: {{type: pagerduty, url: "{receiver.url('/pd')}", routing_key_file: {tmp_path / 'pd-key'}}}
  am: {{type: alertmanager, url: "{receiver.url('')}"}}
  hook: {{type: webhook, url_env: TEST_HOOK_URL}}
rules:
  - name: everything
    group_by: [service]
    channels: [slack, pd, am, hook]
"""
    rs = parse_rules(text, "r.yaml")
    assert rs.errors == []
    return rs


def _anomaly(gpu: str, severity: str = "critical") -> Anomaly:
    return Anomaly("thermal_throttle", severity, "gpu-node-00", gpu, "DCGM_FI_DEV_GPU_TEMP", 1_764_489_600.0,  # type: ignore[arg-type]
                   f"GPU {gpu} on gpu-node-00 thermally throttled at 92 °C " + "x" * 1500,
                   ["clock event reason HW_THERMAL", "temperature 92 °C vs baseline 64 °C"],
                   namespace="research", pod="trainer-0", service="llm-pretrain")


def notifications(rs: RuleSet, count: int = 3) -> tuple[list[Notification], list[Notification], list[Anomaly]]:
    router = Router(rs)
    anomalies = [_anomaly(f"GPU-{i}", "critical" if i else "warning") for i in range(count)]
    for a in anomalies:
        router.on_change(Change("open", a), a.start)
    _, firing = router.tick(1_764_489_700.0)
    anomalies[0] = replace(anomalies[0], end=1_764_489_800.0)
    router.on_change(Change("close", anomalies[0]), 1_764_489_800.0)
    _, resolved = router.tick(1_764_489_900.0)
    return firing, resolved, anomalies


def test_every_channel_payload_matches_its_schema(receiver: Receiver, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rs = ruleset(receiver, tmp_path, monkeypatch)
    firing, resolved, _ = notifications(rs, count=25)  # more alerts than a Slack message shows
    transport = UrllibTransport()
    for n in firing + resolved:
        for body in bodies(rs.channels[n.channel].type, n):
            outcome = send(rs.channels[n.channel], body, transport, FAST)
            assert outcome.ok, (n.channel, outcome, receiver.invalid)
    assert receiver.invalid == []
    pd = receiver.bodies("/pd")
    assert [e["event_action"] for e in pd].count("trigger") == 25 and pd[-1]["event_action"] == "resolve"
    resolve_key = pd[-1]["dedup_key"]
    assert any(e["dedup_key"] == resolve_key and e["event_action"] == "trigger" for e in pd)  # stable key
    assert all(e["routing_key"] == "R" * 32 for e in pd)
    slack = receiver.bodies("/slack")
    assert slack[0]["blocks"][0]["text"]["text"].startswith("[FIRING: 25] everything")
    assert "and 5 more alerts" in slack[0]["blocks"][-1]["elements"][0]["text"]
    am = receiver.bodies("/api/v2/alerts")
    assert len(am[0]) == 25 and am[0][0]["labels"]["alertname"] == "everything"
    hook = receiver.bodies("/hook")
    assert hook[-1]["status"] == "firing" and {a["status"] for a in hook[-1]["alerts"]} == {"firing", "resolved"}


def _channel(receiver: Receiver, path: str = "/hook") -> Channel:
    rs = parse_rules(f"channels:\n  c: {{type: alertmanager, url: '{receiver.url(path)}'}}\n", "r.yaml")
    return rs.channels["c"]


def test_429_and_5xx_are_retried_with_backoff(receiver: Receiver) -> None:
    receiver.script = [(429, {"Retry-After": "0"}), (503, {}), (500, {})]
    slept: list[float] = []
    outcome = send(_channel(receiver), [{"labels": {"a": "b"}}], UrllibTransport(), FAST, sleep=slept.append)
    assert outcome.ok and outcome.attempts == 4
    assert slept == [0.01, 0.02, 0.04]


def test_other_4xx_is_not_retried(receiver: Receiver) -> None:
    receiver.script = [(404, {}), (200, {})]
    outcome = send(_channel(receiver), [{"labels": {"a": "b"}}], UrllibTransport(), FAST, sleep=lambda _s: None)
    assert not outcome.ok and outcome.permanent and outcome.attempts == 1 and outcome.status == 404


def test_network_errors_are_retried_and_never_show_the_url(receiver: Receiver,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import free_port

    monkeypatch.setenv("TEST_SECRET_URL", f"http://127.0.0.1:{free_port()}/services/T000/B000/s3cr3t")
    rs = parse_rules("channels:\n  chat: {type: slack, url_env: TEST_SECRET_URL}\n", "r.yaml")
    outcome = send(rs.channels["chat"], {"text": "hi"}, UrllibTransport(), FAST, sleep=lambda _s: None)
    assert not outcome.ok and outcome.attempts == 4 and not outcome.permanent
    assert outcome.error is not None and "s3cr3t" not in outcome.error and "chat" in outcome.error
    assert "s3cr3t" not in repr(rs.channels["chat"])
