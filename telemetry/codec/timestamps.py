"""The window's timestamps: delta-of-delta of integer ticks, so regular sampling costs almost nothing.

Samples come at a steady interval, so the second difference of the timestamps is zero or
a little jitter. The first timestamp travels in the frame header (the collector routes and
orders by it without decoding); this section carries the rest. Timestamps must come back
bit for bit, so the ticks are chosen like a lossless float column: decimal ticks
``round(ts * 10**e)`` when that verifies (an agent that writes millisecond timestamps gets
``e = 3``), else the IEEE bit patterns as integers (exact for any double, and still
monotonic for positive times), else plain doubles when even those differences overflow.

Layout: ``mode`` byte (low bits: 0 decimal, 1 bits, 2 plain; 0x80: the delta-of-deltas
carry a changed bitmap); decimal: exponent byte; then for two or more records the first
delta as a zigzag varint and the remaining ``n - 2`` delta-of-deltas as a residual block
(:func:`planes.encode_signed`). Plain: ``n - 1`` little-endian doubles. A single record
writes the mode byte ``1`` alone.
"""

from __future__ import annotations

from itertools import accumulate
from operator import sub

from telemetry.codec.planes import (
    bytes_float64,
    bytes_int64,
    decode_signed,
    encode_signed,
    float64_bytes,
    int64_bytes,
)
from telemetry.codec.scaling import MAX_EXPONENT, all_finite, lossless_decimal, unscale_decimal
from telemetry.codec.wire import INT64_MAX, INT64_MIN, Reader, svarint

DECIMAL = 0
BITS = 1
PLAIN = 2
_CHANGED = 0x80
_DELTA_LIMIT = 1 << 62


def _dod(ticks: list[int]) -> tuple[int, list[int]] | None:
    deltas = list(map(sub, ticks[1:], ticks))
    if not (min(deltas) > -_DELTA_LIMIT and max(deltas) < _DELTA_LIMIT):
        return None
    return deltas[0], list(map(sub, deltas[1:], deltas))


def encode_timestamps(ts: list[float]) -> bytes:
    n = len(ts)
    if n == 1:
        return bytes((BITS,))
    head = b""
    dod = None
    if all_finite(ts):
        found = lossless_decimal(ts, None)
        if found is not None:
            e, ticks = found
            head = bytes((DECIMAL, e))
            dod = _dod(ticks)
    if dod is None:
        head = bytes((BITS,))
        dod = _dod(bytes_int64(float64_bytes(ts)))
    if dod is None:
        return bytes((PLAIN,)) + float64_bytes(ts[1:])
    first, rest = dod
    if not rest:
        return head + svarint(first)
    changed, block = encode_signed(rest)
    if changed:
        head = bytes((head[0] | _CHANGED,)) + head[1:]
    return head + svarint(first) + block


def decode_timestamps(r: Reader, n: int, first_ts: float, first_bits: int) -> list[float]:
    """``n`` timestamps; ``first_ts`` and its bit pattern come from the header."""
    start = r.pos
    mode = r.u8("timestamp mode")
    if n == 1:
        if mode != BITS:
            raise r.fail(f"timestamp mode {mode} for a single record", start)
        return [first_ts]
    changed = bool(mode & _CHANGED)
    mode &= ~_CHANGED
    if mode == PLAIN:
        if changed:
            raise r.fail("plain timestamps with a changed bitmap", start)
        return [first_ts, *bytes_float64(r.take(8 * (n - 1), "timestamps"))]
    if mode == DECIMAL:
        e = r.u8("timestamp exponent")
        if e > MAX_EXPONENT:
            raise r.fail(f"timestamp exponent {e} exceeds {MAX_EXPONENT}", r.pos - 1)
        found = lossless_decimal([first_ts], e) if all_finite([first_ts]) else None
        if found is None or found[0] != e:
            raise r.fail(f"first timestamp {first_ts!r} is not a decimal with exponent {e}", start)
        t0 = found[1][0]
    elif mode == BITS:
        t0 = first_bits
    else:
        raise r.fail(f"unknown timestamp mode {mode}", start)
    d1 = r.svarint("first timestamp delta")
    dods = decode_signed(r, n - 2, changed, "timestamp delta-of-deltas") if n > 2 else []
    ticks = list(accumulate(accumulate(dods, initial=d1), initial=t0))
    if mode == DECIMAL:
        return unscale_decimal(ticks, e)
    if not (min(ticks) >= INT64_MIN and max(ticks) <= INT64_MAX):
        raise r.fail("timestamp bit patterns leave 64 bits", start)
    return bytes_float64(int64_bytes(ticks))
