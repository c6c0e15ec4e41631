"""Floats as scaled integers: quantisation to a catalog resolution, and lossless decimal scaling.

Telemetry floats are mostly decimals in disguise: NVML reports power in mW, so a power
reading is ``k / 1000`` for an integer ``k``; a ratio is written with four decimals. Such
a value is exactly ``k / 10**e`` (Python's int/int division is correctly rounded), so it
can travel as the integer ``k`` and come back bit for bit. This is the idea of ALP
(Afroozeh et al., SIGMOD 2024): try the exponent, verify the round trip, fall back when it
fails. Quantised mode skips the verification and rounds to the catalog's resolution, which
keeps every value within half a quantum.

The loops are list comprehensions with the rounding method bound once: on CPython 3.11
that beats ``map`` over ``operator`` functions for the short columns of a window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from telemetry.codec.planes import float64_bytes

MAX_EXPONENT = 18  # 10**18 < 2**63
SCALED_LIMIT = float(1 << 62)  # a single value's search stops where its integer would leave int64
POW10 = tuple(10**e for e in range(MAX_EXPONENT + 1))
_POW10F = tuple(float(p) for p in POW10)
_ROUND = float.__round__  # round() of a float without the special-method lookup
_PROBE = 8  # values a lossless try checks one by one before it scales the column
_SECOND = 24  # where its second, larger step ends
_CLOSE = MAX_EXPONENT - 3  # decimal_exponent tries these last few without a lower bound


def all_finite(values: Sequence[float]) -> bool:
    """True when no value is NaN or infinite (a sum that overflows also says False: a safe miss)."""
    return math.isfinite(sum(values))


def decimal_exponent(value: float, start: int = 0) -> int | None:
    """The smallest ``e >= start`` with ``round(value * 10**e) / 10**e == value`` exactly, if any."""
    size = abs(value)
    if start > MAX_EXPONENT or size * _POW10F[start] >= SCALED_LIMIT:
        return None  # every larger exponent is past the limit too
    if start < _CLOSE:  # far from the end: skip what cannot work (a few exponents are tried faster)
        start = max(start, _fewest_decimals(value))
    for e in range(start, MAX_EXPONENT + 1):
        if size * _POW10F[e] >= SCALED_LIMIT:
            return None
        if _ROUND(value * _POW10F[e]) / _POW10F[e] == value:  # see _exact_unscale
            return e
    return None


def _fewest_decimals(value: float) -> int:
    """A lower bound on the exponents ``e`` for which ``k / 10**e`` gives ``value`` back: skip the rest.

    If ``k / 10**e`` rounds to ``value``, the decimal ``k·10^-e`` (at most ``e`` fractional
    digits) reads back as ``value``, so it has at least as many significant digits as
    ``repr(value)``, the shortest string that does. Both lie within half an ulp of
    ``value``, so their leading digits are at most one decimal place apart, and
    ``e >= (fractional digits of repr) - 1``.
    """
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    _, _, fraction = mantissa.partition(".")
    digits = len(fraction.rstrip("0"))
    if exponent:
        digits -= int(exponent)
    return digits - 1


def quantise_decimal(values: Sequence[float], e: int) -> list[int]:
    """``round(v * 10**e)`` of finite floats; OverflowError when a product is infinite."""
    p = _POW10F[e]
    r = _ROUND
    return [r(v * p) for v in values]


def quantise(values: Sequence[float], quantum: float) -> list[int]:
    """``round(v / quantum)`` of finite floats; OverflowError when a quotient is infinite."""
    r = _ROUND
    return [r(v / quantum) for v in values]


def unscale_decimal(ks: Sequence[int], e: int) -> list[float]:
    d = POW10[e]
    return [k / d for k in ks]


# _exact_unscale: the encoder checks ``k / 10**e`` (integer division, exactly rounded, as the
# decoder computes it) as ``k / 10.0**e`` in floating point, which is much cheaper for large
# ``k`` and gives the same double: ``10**e`` is exact as a double for ``e <= 22``, and
# ``k = round(x)`` of a double ``x`` is exact as a double too (``|k| <= 2**53``, or ``k == x``
# when ``|x| >= 2**52``), so the quotient of two exact operands is rounded once, to nearest
# even, as the integer division rounds it.


def lossless_decimal(values: Sequence[float], hint: int | None, probe: bool = True) -> tuple[int, list[int]] | None:
    """(e, integers) such that ``k / 10**e`` gives back every value bit for bit, or None.

    ``values`` must be finite floats. ``hint`` (from the catalog's resolution) is tried
    first; on a miss the exponent grows to what the first mismatching value needs, a few
    times at most, so a column of noisy full-precision floats gives up quickly.

    Each try first looks at the column's first few values one by one, then scales the next
    few, then the rest: noisy floats miss early, and the first miss is all the next try
    needs, so most failing tries cost a few values instead of the whole column.
    ``probe=False`` skips the one-by-one look for the first try, when the caller expects
    it to succeed (the result is the same either way).
    """
    if type(values) is not list:
        values = list(values)  # compared as lists below
    e = hint if hint is not None else decimal_exponent(values[0])
    n = len(values)
    start = _PROBE if probe else 0
    r = _ROUND
    for _ in range(4):
        if e is None:
            return None
        p = _POW10F[e]
        miss: float | None = None
        ks: list[int] = []
        try:
            for v in values[:start]:
                if r(v * p) / p != v:  # see _exact_unscale
                    miss = v
                    break
            else:
                ks = [r(v * p) for v in values[:start]]
                for a, b in ((start, _SECOND), (max(start, _SECOND), n)):
                    if a >= b:
                        continue
                    part = values[a:b]
                    got = [r(v * p) for v in part]
                    back = [k / p for k in got]
                    if back != part:  # numerically: -0.0 comes back as 0.0, which is no miss
                        miss = next(v for k, v in zip(back, part, strict=True) if k != v)
                        break
                    ks += got
        except OverflowError:
            # An infinite product at this exponent stays infinite at every larger one.
            return None
        if miss is None:
            if 0.0 in values and float64_bytes([k / p for k in ks]) != float64_bytes(values):
                return None  # equal numbers, different bits: a negative zero
            return e, ks
        e = decimal_exponent(miss, e + 1)
        start = _PROBE
    return None
