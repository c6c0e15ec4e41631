"""Gorilla-style XOR for floats that are not decimals: the lossless fallback of a float column.

Gorilla (Pelkonen et al., VLDB 2015) XORs each double with the previous one and stores
only the bits between the leading and trailing zeros. Doing that bit by bit in Python is
far too slow for a codec that must pass a million values a second, so this module keeps
the idea and changes the granularity: the whole column is one big integer, the XOR with
the previous value is one shift and one XOR, the leading/trailing-zero window is chosen
per column and per byte (all-zero byte planes are dropped, see :mod:`planes`), and the
decoder undoes the XOR chain with a log-step prefix scan. Unchanged values cost one bit
through the changed bitmap, as Gorilla's single ``0`` bit does.
"""

from __future__ import annotations

from collections.abc import Sequence

from telemetry.codec.planes import bytes_float64, decode_words, encode_words, float64_bytes
from telemetry.codec.wire import Reader

MASK64 = (1 << 64) - 1


def xor_encode(values: Sequence[float], base_bits: int) -> tuple[int, bool, bytes, int]:
    """(first XOR base, changed bitmap used, residual block, last value's bits) for ``values``."""
    n = len(values)
    a = int.from_bytes(float64_bytes(values), "little")
    first = (a & MASK64) ^ base_bits
    last = a >> (64 * (n - 1))
    if n == 1:
        return first, False, b"", last
    rest = ((a ^ (a << 64)) >> 64) & ((1 << (64 * (n - 1))) - 1)
    changed, block = encode_words(rest.to_bytes(8 * (n - 1), "little"), n - 1)
    return first, changed, block, last


def xor_value(bits: int) -> float:
    """The float whose IEEE bits are ``bits``."""
    return bytes_float64(bits.to_bytes(8, "little"))[0]


def xor_decode(r: Reader, n: int, first: int, changed: bool, base_bits: int) -> tuple[list[float], int]:
    """Values and the last value's bits; ``first`` is already checked to be a 64-bit word."""
    x = first ^ base_bits
    if n > 1:
        x |= int.from_bytes(decode_words(r, n - 1, changed, "xor residuals"), "little") << 64
        total = 64 * n
        shift = 64
        while shift < total:
            x ^= x << shift
            shift <<= 1
        x &= (1 << total) - 1
    return bytes_float64(x.to_bytes(8 * n, "little")), x >> (64 * (n - 1))
