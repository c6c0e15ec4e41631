"""Rules YAML: good rules load, each bad one is an error naming file and line, nothing crashes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.alerting.rules import load_rules, parse_duration, parse_rules

GOOD = """\
defaults:
  repeat_interval: 1h
detectors: {idle_after: 15m}
channels:
  am: {type: alertmanager, url: "http://127.0.0.1:9093"}
  chat:
    type: slack
    url_env: TEST_SLACK_URL
rules:
  - name: hw
    kinds: [xid, gpu_lost]
    channels: [am]
    severity_channels: {critical: [chat]}
  - name: perf
    for: 90s
    min_severity: warning
    match: {namespace: research}
    channels: [chat]
    group_by: [node]
"""


def test_good_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SLACK_URL", "https://hooks.slack.test/services/T/B/secret")
    rs = parse_rules(GOOD, "r.yaml")
    assert rs.errors == [] and rs.idle_after_s == 900
    hw, perf = rs.rules
    assert hw.kinds == frozenset({"xid", "gpu_lost"}) and hw.repeat_interval_s == 3600
    assert hw.channels_for("critical") == ("am", "chat") and hw.channels_for("warning") == ("am",)
    assert perf.for_s == 90 and perf.group_by == ("node",)
    assert perf.matches({"kind": "x", "severity": "critical", "namespace": "research"})
    assert not perf.matches({"kind": "x", "severity": "info", "namespace": "research"})
    assert not perf.matches({"kind": "x", "severity": "critical", "namespace": "other"})
    assert "secret" not in repr(rs.channels["chat"])


def test_each_bad_rule_is_reported_with_its_line_and_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_SLACK_URL", raising=False)
    text = GOOD + """\
  - name: broken
    for: soon
    channels: [am]
  - name: nowhere
    channels: [pager]
  - channels: [am]
"""
    rs = parse_rules(text, "r.yaml")
    assert rs.rules == []  # 'hw' and 'perf' need 'chat', whose secret is missing
    messages = [str(e) for e in rs.errors]
    assert "r.yaml:7: channel 'chat': environment variable TEST_SLACK_URL is not set or empty" in messages
    assert "r.yaml:10: rule 'hw': unknown channel 'chat'" in messages
    assert "r.yaml:14: rule 'perf': unknown channel 'chat'" in messages
    assert "r.yaml:20: rule 'broken': 'soon' is not a duration like 30s, 5m or 4h" in messages
    assert "r.yaml:23: rule 'nowhere': unknown channel 'pager'" in messages
    assert "r.yaml:25: rule None: a rule needs a name" in messages


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: a\n    channels: [x\n  - name: b\n")
    rs = load_rules(path)
    assert rs.rules == [] and len(rs.errors) == 1
    assert str(rs.errors[0]).startswith(f"{path}:4: YAML syntax")
    missing = tmp_path / "missing.yaml"
    assert str(load_rules(missing).errors[0]).startswith(f"{missing}:0: cannot read")


def test_bad_detector_settings_are_errors_with_lines() -> None:
    rs = parse_rules("detectors:\n  idle_after: never\n  other: 1\n", "r.yaml")
    assert [str(e) for e in rs.errors] == [
        "r.yaml:2: detectors: unknown keys ['other']",
        "r.yaml:2: detectors.idle_after: 'never' is not a duration like 30s, 5m or 4h",
    ]
    assert rs.idle_after_s is None


def test_inline_secrets_are_refused() -> None:
    rs = parse_rules("channels:\n  c: {type: slack, url: 'https://hooks.slack.test/x'}\n", "r.yaml")
    assert "not inline" in str(rs.errors[0]) and "hooks.slack" not in str(rs.errors[0])


def test_durations() -> None:
    assert parse_duration("250ms") == 0.25 and parse_duration("5m") == 300 and parse_duration(7) == 7.0
    with pytest.raises(ValueError):
        parse_duration("-1s")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_rules_or_errors_never_an_exception(text: str) -> None:
    rs = parse_rules(text, "f.yaml")
    for err in rs.errors:
        assert str(err).startswith("f.yaml:")


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6),
                    st.sampled_from(["30s", "xid", "critical", "am", "slack", "webhook"]))
_value = st.recursive(_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.sampled_from(["name", "for", "channels", "kinds", "type", "url", "match", "critical", "severity_channels",
                     "group_by", "send_resolved", "min_severity"]), c, max_size=4), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["channels", "rules", "defaults", "other"]), _value, max_size=3))
def test_any_structure_gives_rules_or_errors_never_an_exception(doc: dict[str, object]) -> None:
    import yaml

    rs = parse_rules(yaml.safe_dump(doc), "f.yaml")
    for err in rs.errors:
        assert str(err).startswith("f.yaml:")


def test_the_example_rules_file_loads_and_sets_the_detectors(monkeypatch: pytest.MonkeyPatch) -> None:
    from collector.alerting.service import from_rules_file

    monkeypatch.setenv("GPUWATCH_PAGERDUTY_ROUTING_KEY", "k" * 32)
    monkeypatch.setenv("GPUWATCH_SLACK_WEBHOOK_URL", "https://hooks.slack.test/services/T/B/x")
    path = Path(__file__).resolve().parents[2] / "collector" / "alerting" / "default_rules.yaml"
    rs = load_rules(path)
    assert rs.errors == [] and [r.name for r in rs.rules] == ["gpu-hardware", "gpu-performance", "gpu-idle-allocated"]
    service = from_rules_file(None, str(path))
    assert service.engine.cfg.idle_after_s == 600 and service.counters["rule_errors"] == 0
    monkeypatch.delenv("GPUWATCH_SLACK_WEBHOOK_URL")
    assert from_rules_file(None, str(path)).counters["rule_errors"] == 4  # the channel and the 3 rules using it
