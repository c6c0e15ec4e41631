"""The small shared pieces in telemetry/: rate-limited logging and the control message."""

from __future__ import annotations

import contextlib
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.control import ControlError, KeyframeRequest, control_topic, dlq_topic
from telemetry.ratelimit import RateLimitedLog


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_repeats_are_one_line_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    rl = RateLimitedLog(logging.getLogger("t.rl"), every_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, "t.rl"):
        for i in range(63):
            clock.t = i * 0.1
            rl.warning("broker", "broker down: %s", f"attempt {i}")
        assert len(caplog.records) == 1
        clock.t = 10.5
        assert rl.warning("broker", "broker down: %s", "again")
    assert len(caplog.records) == 2
    assert "62 more like this" in caplog.records[1].getMessage()
    assert rl.suppressed_total == 62


def test_keys_are_independent_and_resolve_reports(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    rl = RateLimitedLog(logging.getLogger("t.rl2"), every_s=10, clock=clock)
    with caplog.at_level(logging.INFO, "t.rl2"):
        rl.error("a", "a failed")
        rl.error("b", "b failed")
        rl.error("a", "a failed")
        rl.resolved("a", "a is back")
        rl.resolved("never", "not logged")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["a failed", "b failed", "a is back (after 1 more suppressed lines)"]


def test_key_table_is_bounded() -> None:
    rl = RateLimitedLog(logging.getLogger("t.rl3"), every_s=10, clock=_Clock(), max_keys=4)
    for i in range(100):
        rl.warning(f"k{i}", "x")
    assert len(rl._seen) <= 4


def test_topics() -> None:
    assert dlq_topic("gpu.telemetry") == "gpu.telemetry.dlq"
    assert control_topic("gpu.telemetry") == "gpu.telemetry.control"


def test_keyframe_request_round_trip() -> None:
    req = KeyframeRequest("node-1", "GPU-abc", "base lost", 12.5, instance="i-1")
    assert KeyframeRequest.decode(req.encode()) == req
    assert req.matches("node-1", "i-1") and not req.matches("node-1", "i-2") and not req.matches("n2", "i-1")
    anyone = KeyframeRequest("node-1", None, "broker empty", 1.0)
    assert KeyframeRequest.decode(anyone.encode()) == anyone and anyone.matches("node-1", "whatever")


@pytest.mark.parametrize(("raw", "field"), [
    (b"\xff", "not JSON"), (b"[1]", "not a JSON object"), (b'{"type":"x"}', "type"),
    (b'{"type":"keyframe_request","gpu":null,"reason":"","ts":1}', "'node'"),
    (b'{"type":"keyframe_request","node":"n","gpu":1,"reason":"","ts":1}', "'gpu'"),
    (b'{"type":"keyframe_request","node":"n","gpu":null,"reason":"","ts":"x"}', "'ts'"),
    (b'{"type":"keyframe_request","node":"n","gpu":null,"reason":"","ts":NaN}', "'ts'"),
    (b'{"type":"keyframe_request","node":"n","gpu":null,"reason":5,"ts":1}', "'reason'"),
])
def test_bad_control_messages_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(ControlError, match=field):
        KeyframeRequest.decode(raw)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_control_error(raw: bytes) -> None:
    with contextlib.suppress(ControlError):
        KeyframeRequest.decode(raw)
