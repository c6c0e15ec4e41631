"""Parsing of the query parameters every endpoint shares: times, steps, ranges, cursors.

Why by hand rather than by pydantic types: times may be RFC 3339 or epoch seconds and
steps ``60``, ``60s``, ``5m`` or ``1h``; a bad one must answer 400 naming the field,
and the point limit must be checked before any SQL runs. Times are held to
[:data:`MIN_TIME`, :data:`MAX_TIME`] and steps to [:data:`MIN_STEP`, :data:`MAX_RANGE`]
before any arithmetic, so no value a client sends can overflow ``datetime`` or
``timedelta`` (``9999-12-31T23:59:59-14:00`` or a 21-digit step are 400s, not 500s).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from collector.api.errors import ApiError, bad_request

_STEP_RE: Final = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MIN_STEP: Final = timedelta(seconds=1)
MAX_RANGE: Final = timedelta(days=800)
#: The times a request may name; far enough inside ``datetime``'s range that a range of
#: :data:`MAX_RANGE` and a step of it can be added or subtracted without overflow.
MIN_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME: Final = datetime(9000, 1, 1, tzinfo=UTC)


def parse_time(value: str | None, field: str, default: datetime) -> datetime:
    """RFC 3339 (``2026-11-30T10:00:00Z``, offset required) or Unix epoch seconds."""
    if value is None or value == "":
        return default
    text = value.strip()
    out_of_range = bad_request(field, f"out of range: times must lie between {MIN_TIME:%Y-%m-%d} and "
                                      f"{MAX_TIME:%Y-%m-%d} (epoch seconds {MIN_TIME.timestamp():.0f} to "
                                      f"{MAX_TIME.timestamp():.0f})")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or not MIN_TIME.timestamp() <= seconds <= MAX_TIME.timestamp():
            raise out_of_range
        return datetime.fromtimestamp(seconds, UTC)
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise bad_request(field, "expected RFC 3339 (e.g. 2026-11-30T10:00:00Z) or epoch seconds") from None
    if parsed.tzinfo is None:
        raise bad_request(field, "an RFC 3339 time needs an offset (Z or +hh:mm)")
    try:
        utc = parsed.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is past datetime.max in UTC
        raise out_of_range from None
    if not MIN_TIME <= utc <= MAX_TIME:
        raise out_of_range
    return utc


def parse_step(value: str | None, field: str, default: timedelta) -> timedelta:
    """Seconds (``60``) or a number with a unit (``500ms``, ``60s``, ``5m``, ``1h``, ``1d``)."""
    if value is None or value == "":
        return default
    match = _STEP_RE.match(value.strip())
    if match is None:
        raise bad_request(field, "expected seconds or a duration such as 60s, 5m, 1h")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]  # finite: the pattern has no exponent
    if seconds > MAX_RANGE.total_seconds():  # checked before timedelta(), which overflows past 10^9 days
        raise bad_request(field, f"the largest step is {MAX_RANGE.days} days")
    step = timedelta(seconds=seconds)
    if step < MIN_STEP:
        raise bad_request(field, f"the smallest step is {MIN_STEP.total_seconds():g} s")
    return step


@dataclass(frozen=True, slots=True)
class TimeRange:
    start: datetime
    end: datetime
    step: timedelta

    @property
    def buckets(self) -> int:
        """Upper bound of the number of step buckets between start and end."""
        return math.ceil((self.end - self.start) / self.step) + 1


def span(
    start: str | None, end: str | None, *, default_span: timedelta, now: datetime | None = None,
) -> tuple[datetime, datetime]:
    """``[start, end)`` from the two parameters (end defaults to now, start to ``default_span`` before end)."""
    end_t = parse_time(end, "end", now or datetime.now(UTC))
    start_t = parse_time(start, "start", max(MIN_TIME, end_t - default_span))
    if start_t >= end_t:
        raise bad_request("start", "start must be before end")
    if end_t - start_t > MAX_RANGE:
        raise bad_request("start", f"the range may span at most {MAX_RANGE.days} days")
    return start_t, end_t


def time_range(
    start: str | None, end: str | None, step: str | None, *, default_span: timedelta, default_step: timedelta,
    now: datetime | None = None,
) -> TimeRange:
    start_t, end_t = span(start, end, default_span=default_span, now=now)
    return TimeRange(start_t, end_t, parse_step(step, "step", default_step))


def check_points(points: int, limit: int) -> None:
    """400 when a response would carry more than ``limit`` points."""
    if points > limit:
        raise ApiError(
            400, "too_many_points",
            f"this request would return up to {points} points; the limit is {limit} per response "
            "(use a larger step, a shorter range or fewer metrics)",
            field="step", limit=limit,
        )


def encode_cursor(values: list[Any]) -> str:
    """An opaque cursor holding the sort key of the last row returned."""
    return base64.urlsafe_b64encode(json.dumps(values, default=str).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, types: tuple[type, ...]) -> list[Any] | None:
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
    except (binascii.Error, ValueError):
        raise bad_request("cursor", "not a cursor returned by this API") from None
    if not isinstance(values, list) or len(values) != len(types):
        raise bad_request("cursor", "not a cursor returned by this API")
    out: list[Any] = []
    for value, kind in zip(values, types, strict=True):
        if kind is datetime:
            try:
                stamp = datetime.fromisoformat(value).astimezone(UTC)
            except (TypeError, ValueError, OverflowError):
                raise bad_request("cursor", "not a cursor returned by this API") from None
            if not MIN_TIME <= stamp <= MAX_TIME:
                raise bad_request("cursor", "not a cursor returned by this API")
            out.append(stamp)
        elif (kind is int and isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63) or (
            kind is str and isinstance(value, str)
        ):
            out.append(value)
        else:
            raise bad_request("cursor", "not a cursor returned by this API")
    return out
