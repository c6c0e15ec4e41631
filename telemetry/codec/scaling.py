"""Floats as scaled integers: quantisation to a catalog resolution, and lossless decimal scaling.

Telemetry floats are mostly decimals in disguise: NVML reports power in mW, so a power
reading is ``k / 1000`` for an integer ``k``; a ratio is written with four decimals. Such
a value is exactly ``k / 10**e`` (Python's int/int division is correctly rounded), so it
can travel as the integer ``k`` and come back bit for bit. This is the idea of ALP
(Afroozeh et al., SIGMOD 2024): try the exponent, verify the round trip, fall back when it
fails. Quantised mode skips the verification and rounds to the catalog's resolution, which
keeps every value within half a quantum.

All loops here are ``map`` over C functions, never a Python-level loop per value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import mul, truediv

from telemetry.codec.planes import float64_bytes

MAX_EXPONENT = 18  # 10**18 < 2**63
SCALED_LIMIT = float(1 << 62)  # a single value's search stops where its integer would leave int64
POW10 = tuple(10**e for e in range(MAX_EXPONENT + 1))
_POW10F = tuple(float(p) for p in POW10)


def all_finite(values: Sequence[float]) -> bool:
    """True when no value is NaN or infinite (a sum that overflows also says False: a safe miss)."""
    return math.isfinite(sum(values))


def decimal_exponent(value: float, start: int = 0) -> int | None:
    """The smallest ``e >= start`` with ``round(value * 10**e) / 10**e == value`` exactly, if any."""
    size = abs(value)
    for e in range(start, MAX_EXPONENT + 1):
        if size * _POW10F[e] >= SCALED_LIMIT:
            return None
        k = round(value * _POW10F[e])
        if k / POW10[e] == value:
            return e
    return None


def quantise_decimal(values: Sequence[float], e: int) -> list[int]:
    """``round(v * 10**e)`` of finite values; OverflowError when a product is infinite."""
    return list(map(round, map(mul, values, repeat(_POW10F[e]))))


def quantise(values: Sequence[float], quantum: float) -> list[int]:
    """``round(v / quantum)`` of finite values; OverflowError when a quotient is infinite."""
    return list(map(round, map(truediv, values, repeat(quantum))))


def unscale_decimal(ks: Sequence[int], e: int) -> list[float]:
    return list(map(truediv, ks, repeat(POW10[e])))


def lossless_decimal(values: list[float], hint: int | None) -> tuple[int, list[int]] | None:
    """(e, integers) such that ``k / 10**e`` gives back every value bit for bit, or None.

    ``values`` must be finite floats. ``hint`` (from the catalog's resolution) is tried
    first; on a miss the exponent grows to what the first mismatching value needs, a few
    times at most, so a column of noisy full-precision floats gives up quickly.
    """
    raw = float64_bytes(values)  # compared as bytes, so that -0.0 is not taken for 0.0
    e = hint if hint is not None else decimal_exponent(values[0])
    for _ in range(4):
        if e is None:
            return None
        try:
            ks = quantise_decimal(values, e)
        except OverflowError:
            return None
        back = unscale_decimal(ks, e)
        if float64_bytes(back) == raw:
            return e, ks
        miss = next((b for a, b in zip(back, values, strict=True) if a != b), None)
        if miss is None:  # equal numbers, different bits: a negative zero
            return None
        e = decimal_exponent(miss, e + 1)
    return None
