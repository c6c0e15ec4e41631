"""Parsing of times, steps and cursors, and the opaque ids, under generated input (Hypothesis).

Whatever a client sends, a parser returns a value inside the documented bounds or raises
an :class:`ApiError` 400 naming the field; nothing else (no OverflowError, no 500).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.api.errors import ApiError
from collector.api.ids import IdCodec
from collector.api.params import (
    MAX_RANGE,
    MAX_TIME,
    MIN_STEP,
    MIN_TIME,
    decode_cursor,
    parse_step,
    parse_time,
    time_range,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
_offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
_rfc3339 = st.builds(lambda d, tz: d.replace(tzinfo=tz).isoformat(), st.datetimes(), _offsets)
_epochs = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30)).map(str)
_steps = st.from_regex(r"\A[0-9]{1,25}(\.[0-9]{1,6})?(ms|s|m|h|d)?\Z")


def _bad(exc: ApiError, field: str) -> None:
    assert exc.status == 400 and exc.body.field == field and exc.body.message.startswith(field)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_rfc3339, _epochs, st.text(max_size=40)))
def test_parse_time_is_bounded_or_a_400(text: str) -> None:
    try:
        t = parse_time(text, "end", NOW)
    except ApiError as exc:
        _bad(exc, "end")
    else:
        assert t.tzinfo is not None and MIN_TIME <= t <= MAX_TIME


@settings(max_examples=300, deadline=None)
@given(st.one_of(_steps, st.text(max_size=32)))
def test_parse_step_is_bounded_or_a_400(text: str) -> None:
    try:
        step = parse_step(text, "step", timedelta(minutes=1))
    except ApiError as exc:
        _bad(exc, "step")
    else:
        assert MIN_STEP <= step <= MAX_RANGE


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), _rfc3339, _epochs), st.one_of(st.none(), _rfc3339, _epochs),
       st.one_of(st.none(), _steps))
def test_time_range_never_overflows(start: str | None, end: str | None, step: str | None) -> None:
    try:
        rng = time_range(start, end, step, default_span=timedelta(hours=24), default_step=timedelta(minutes=1),
                         now=NOW)
    except ApiError as exc:
        assert exc.status == 400 and exc.body.field in ("start", "end", "step")
    else:
        assert rng.start < rng.end and rng.end - rng.start <= MAX_RANGE and rng.buckets >= 1


@pytest.mark.parametrize(("text", "field"), [
    ("9999-12-31T23:59:59-14:00", "end"), ("0001-01-01T00:00:00+14:00", "end"), ("1" * 21, "end"),
    ("1e400", "end"), ("nan", "end"), ("-1", "end"),
])
def test_the_reported_edges_are_400s(text: str, field: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_time(text, field, NOW)
    _bad(caught.value, field)
    with pytest.raises(ApiError) as caught:
        parse_step("1" * 21, "step", timedelta(minutes=1))
    _bad(caught.value, "step")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_cursors_decode_or_400(text: str) -> None:
    try:
        decode_cursor(text, (datetime, str, str, int))
    except ApiError as exc:
        _bad(exc, "cursor")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**63 - 1), st.binary(min_size=16, max_size=64), st.text(max_size=30))
def test_opaque_ids_round_trip_and_reject_everything_else(row_id: int, key: bytes, junk: str) -> None:
    codec = IdCodec(key)
    text = codec.encode("silence", row_id)
    assert codec.decode("silence", text) == row_id
    assert codec.decode("alert", "al_" + text[3:]) is None  # the kind is part of the id
    assert codec.decode("silence", junk) is None or junk == text
    assert IdCodec(key + b"other").decode("silence", text) is None  # another database's key: unknown


def test_neighbouring_ids_share_nothing() -> None:
    codec = IdCodec(b"k" * 32)
    a, b = codec.encode("anomaly", 41), codec.encode("anomaly", 42)
    assert a[3:6] != b[3:6] and sum(x != y for x, y in zip(a, b, strict=True)) > 15
