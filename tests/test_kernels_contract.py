"""``KernelWindow.decode`` on anything: a window, or a ValueError naming what is wrong, never another exception.

Why: the collector reads ``kernels`` messages from a topic any agent (or anything with write
access to it) produces to; its ingest step sets aside what raises :class:`ValueError` and would
stop on anything else, retrying the same batch forever. So bytes, arbitrary JSON, and JSON
that is a window in every field but one must all come back as a window or a ValueError.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.kernels import MAX_VALUE_BYTES, KernelWindow
from tests.support.kernel_windows import training

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
TEMPLATE: dict[str, Any] = json.loads(training(1.7e9).encode())


def _decodes_or_names(raw: bytes) -> KernelWindow | None:
    try:
        return KernelWindow.decode(raw)
    except ValueError as exc:
        assert str(exc), "a ValueError without a message"
        return None


@FAST
@given(st.binary(max_size=2048))
def test_arbitrary_bytes(raw: bytes) -> None:
    _decodes_or_names(raw)


@FAST
@given(json_values)
def test_arbitrary_json(value: object) -> None:
    _decodes_or_names(json.dumps(value).encode())


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_paths(v, (*prefix, i)))
    return out


PATHS = _paths(TEMPLATE)


@FAST
@given(st.sampled_from(PATHS), json_values)
def test_a_window_with_one_field_replaced(path: tuple[Any, ...], value: object) -> None:
    body = json.loads(json.dumps(TEMPLATE))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    window = _decodes_or_names(json.dumps(body).encode())
    if window is not None:  # what it accepted is what it was given, in the contract's types
        assert window.pid >= 0 and window.period_s >= window.duration_s
        assert all(k.calls >= 1 and 0 <= k.short_calls <= k.calls for k in window.kernels)


@FAST
@given(st.sampled_from(PATHS))
def test_a_window_with_one_field_removed(path: tuple[Any, ...]) -> None:
    body = json.loads(json.dumps(TEMPLATE))
    target = body
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    _decodes_or_names(json.dumps(body).encode())


def test_hostile_shapes_are_value_errors() -> None:
    for raw in (b"[" * 100_000, b'{"a":' * 40_000 + b"1" + b"}" * 40_000, b"1" * 5000, b'"\\ud800"',
                b"\x00" * 10, json.dumps({**TEMPLATE, "ts": 10**400}).encode(), b"x" * (MAX_VALUE_BYTES + 1)):
        assert _decodes_or_names(raw) is None, raw[:40]


def test_the_template_round_trips() -> None:
    assert KernelWindow.decode(training(1.7e9).encode()) == training(1.7e9)


def test_an_integer_past_float_range_is_a_wrong_field_in_every_json_decoder() -> None:
    """JSON allows ``10**400``; ``math.isfinite`` raises OverflowError on it, which would have
    escaped the profile and control decoders and stopped the loop that called them."""
    from telemetry.control import ControlError, decode_control
    from telemetry.profile import ProfileResult

    huge = b"9" * 400
    with pytest.raises(ValueError, match="'ts'"):
        ProfileResult.decode(b'{"type":"profile","node":"n","gpu":"g","anomaly":1,"ts":' + huge
                             + b',"processes":[],"status":"disabled"}')
    with pytest.raises(ControlError):
        decode_control(b'{"type":"keyframe_request","node":"n","gpu":"g","reason":"r","ts":' + huge + b"}")
    with pytest.raises(ValueError, match="'ts'"):
        KernelWindow.decode(b'{"type":"kernels","ts":' + huge + b',"duration_s":1,"period_s":10,"pid":1}')
