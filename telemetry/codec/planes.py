"""Bitmaps and byte planes: how a column of small integers becomes few bytes at C speed.

A window's residuals (deltas, delta-of-deltas, XORs) are mostly small. Instead of a
per-value varint loop in Python, a column is packed with one width for the whole column:
the values go through ``struct`` as 8, 16, 32 or 64-bit integers, and only the low ``w``
byte planes are kept (plane ``j`` holds byte ``j`` of every value), which is a handful of
slice operations however long the column is. Keeping planes apart also hands zstd long
runs of equal high bytes. A bitmap of the nonzero positions replaces the zeros when that
is smaller, so an unchanged value costs one bit.

Bitmaps are least-significant-bit first: bit ``i`` is bit ``i % 8`` of byte ``i // 8``.

Everything here runs as C loops (``struct``, ``bytes.translate``, slicing, big-integer
operations); a precompiled :class:`struct.Struct` per (type, count) is several times
faster than ``array`` for the short columns of a window.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import accumulate

from telemetry.codec.wire import Reader

SIGN_EXT = bytes(0xFF if b & 0x80 else 0 for b in range(256))
_TO_ASCII01 = bytes.maketrans(b"\x00\x01", b"01")
FROM_ASCII01 = bytes.maketrans(b"01", b"\x00\x01")
NONZERO = bytes([0]) + bytes([1]) * 255  # translate table: byte -> 0 if zero else 1
_BYTE = tuple(bytes((i,)) for i in range(256))

# struct.Struct("<{n}{code}") per code and count, made on first use (a few dozen in practice).
_STRUCTS: dict[str, dict[int, struct.Struct]] = {code: {} for code in "bhiqQd"}
_MAX_CACHED = 1024  # counts per code kept; corrupt input can ask for many, so the cache is bounded


def codec(code: str, n: int) -> struct.Struct:
    """The little-endian Struct of ``n`` items of struct type ``code`` (one of b h i q Q d)."""
    cache = _STRUCTS[code]
    s = cache.get(n)
    if s is None:
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        s = cache[n] = struct.Struct(f"<{n}{code}")
    return s


def pack_bits(flags: bytes) -> bytes:
    """One byte (0 or 1) per position in, one bit per position out."""
    n = len(flags)
    if n == 0:
        return b""
    return int(flags.translate(_TO_ASCII01)[::-1], 2).to_bytes((n + 7) >> 3, "little")


def read_bits(r: Reader, n: int, what: str) -> str:
    """``n`` bits as a string of '0'/'1', position ``i`` at index ``i``; padding bits must be 0."""
    if n == 0:
        return ""
    start = r.pos
    value = int.from_bytes(r.take((n + 7) >> 3, what), "little")
    if value >> n:
        raise r.fail(f"{what}: bit set past position {n}", start)
    return format(value, "b").zfill(n)[::-1]


def read_flags(r: Reader, n: int, what: str) -> tuple[bytes, int]:
    """``n`` bits as one byte (0 or 1) per position, and how many are set; padding bits must be 0."""
    if n == 0:
        return b"", 0
    start = r.pos
    value = int.from_bytes(r.take((n + 7) >> 3, what), "little")
    if value >> n:
        raise r.fail(f"{what}: bit set past position {n}", start)
    return format(value, "b").zfill(n)[::-1].encode("ascii").translate(FROM_ASCII01), value.bit_count()


def spread(flags: bytes, stored: Sequence[object], fill: object) -> list[object]:
    """``stored`` values at the positions whose flag is 1, ``fill`` at the others (len(stored) == flags.count(1))."""
    take = iter(stored).__next__
    return [take() if f else fill for f in flags]


def expand_running(flags: bytes, stored: Sequence[int], first: int) -> list[int]:
    """The running sum ``first, first + r_1, ...`` of residuals that are ``stored`` where flagged and 0 elsewhere.

    ``len(flags) + 1`` values: a residual that is 0 repeats the sum before it, so the sums
    of the stored residuals alone, indexed by the count of flags so far, give every sum.
    """
    sums = list(accumulate(stored, initial=first))
    return list(map(sums.__getitem__, accumulate(flags, initial=0)))


def int64_bytes(values: Sequence[int]) -> bytes:
    return codec("q", len(values)).pack(*values)


def bytes_int64(raw: bytes | bytearray) -> list[int]:
    return list(codec("q", len(raw) >> 3).unpack(raw))


def uint64_bytes(values: Sequence[int]) -> bytes:
    return codec("Q", len(values)).pack(*values)


def bytes_uint64(raw: bytes | bytearray) -> list[int]:
    return list(codec("Q", len(raw) >> 3).unpack(raw))


def float64_bytes(values: Sequence[float]) -> bytes:
    return codec("d", len(values)).pack(*values)


def bytes_float64(raw: bytes | bytearray) -> list[float]:
    return list(codec("d", len(raw) >> 3).unpack(raw))


# The struct type holding a value of w bytes: widths 3, 5, 6 and 7 ride in the next size up.
CONTAINER = (0, 1, 2, 4, 4, 8, 8, 8, 8)
SIGNED_CODE = {1: "b", 2: "h", 4: "i", 8: "q"}


def narrowest(values: Sequence[int]) -> tuple[int, bytes]:
    """(container size, little-endian bytes) of the narrowest integer type that takes every value.

    Bytes, then 16 bits are tried first (most residuals are small); a wider column is
    measured with ``min`` and ``max`` and packed once, rather than failing each type in turn.
    """
    n = len(values)
    try:
        return 1, codec("b", n).pack(*values)
    except struct.error:
        pass
    try:
        return 2, codec("h", n).pack(*values)
    except struct.error:
        pass
    for size, code in ((4, "i"), (8, "q")):
        try:
            return size, codec(code, n).pack(*values)
        except struct.error:
            continue
    raise OverflowError("residual wider than 64 bits")


def nonzero_flags(raw: bytes, size: int, width: int) -> bytes:
    """One byte (0 or 1) per value packed ``size`` bytes apart: whether any of its low ``width`` bytes is set."""
    flags = raw.translate(NONZERO)
    if size == 1:
        return flags
    n = len(raw) // size
    acc = int.from_bytes(flags[0::size], "little")
    for j in range(1, width):
        acc |= int.from_bytes(flags[j::size], "little")
    return acc.to_bytes(n, "little")


def encode_signed(values: Sequence[int]) -> tuple[bool, bytes]:
    """Residuals as ``[changed bitmap] width planes``; says whether the bitmap is there.

    Raises OverflowError when a residual does not fit in 64 bits (the caller falls back).
    """
    n = len(values)
    zeros = values.count(0)
    if zeros == n:
        return False, b"\x00"
    size, raw = narrowest(values)
    width = size
    while width > size // 2 + 1 and raw[width - 1 :: size] == raw[width - 2 :: size].translate(SIGN_EXT):
        width -= 1
    bitmap = b""
    if zeros * width > (n + 7) >> 3:
        bitmap = pack_bits(nonzero_flags(raw, size, width))
        kept = list(filter(None, values))
        raw = codec(SIGNED_CODE[size], len(kept)).pack(*kept)
    planes = raw if size == 1 else b"".join([raw[j::size] for j in range(width)])
    return bool(bitmap), bitmap + _BYTE[width] + planes


def _read_planes(r: Reader, k: int, what: str, start: int, changed: bool) -> tuple[int, ...] | None:
    """The ``k`` stored residuals of a block whose changed bitmap (if any) was read; None for width 0."""
    width = r.u8(f"{what} width")
    if width == 0:
        if changed:
            raise r.fail(f"{what}: changed bitmap with zero width", start)
        return None
    if width > 8:
        raise r.fail(f"{what}: width {width} exceeds 8 bytes", start)
    data = r.take(width * k, what)
    size = CONTAINER[width]
    if size == 1:
        return codec("b", k).unpack(data)
    full = bytearray(size * k)
    for j in range(width):
        full[j::size] = data[j * k : (j + 1) * k]
    if width < size:
        ext = data[(width - 1) * k : width * k].translate(SIGN_EXT)
        for j in range(width, size):
            full[j::size] = ext
    return codec(SIGNED_CODE[size], k).unpack(full)


def read_signed(r: Reader, n: int, changed: bool, what: str) -> tuple[bytes | None, tuple[int, ...] | None]:
    """A residual block of ``n`` residuals as (changed flags or None, stored residuals or None for all zero).

    Without a changed bitmap the stored residuals are all ``n`` of them; with one, they are
    the residuals at the flagged positions (the others are 0).
    """
    flags: bytes | None = None
    k = n
    if changed:
        flags, k = read_flags(r, n, f"{what} changed bitmap")
    start = r.pos
    return flags, _read_planes(r, k, what, start, changed)


def decode_signed(r: Reader, n: int, changed: bool, what: str) -> list[int]:
    """The inverse of :func:`encode_signed` for ``n`` residuals."""
    flags, stored = read_signed(r, n, changed, what)
    if stored is None:
        return [0] * n
    if flags is None:
        return list(stored)
    return spread(flags, stored, 0)  # type: ignore[return-value]


def encode_words(raw: bytes, n: int) -> tuple[bool, bytes]:
    """``n`` little-endian 64-bit words as ``[changed bitmap] plane-mask planes``; all-zero planes are dropped."""
    zero_plane = bytes(n)
    planes = [raw[j::8] for j in range(8)]
    kept = [j for j in range(8) if planes[j] != zero_plane]
    if not kept:
        return False, b"\x00"
    mask = 0
    for j in kept:
        mask |= 1 << j
    # A word is zero only where every kept plane has a zero byte; a plane without one rules it out.
    if all(0 in planes[j] for j in kept):
        flags = nonzero_flags(raw, 8, 8)
        if (n - flags.count(1)) * len(kept) > (n + 7) >> 3:
            words = codec("Q", n).unpack(raw)
            nonzero = list(filter(None, words))
            raw = codec("Q", len(nonzero)).pack(*nonzero)
            return True, pack_bits(flags) + _BYTE[mask] + b"".join([raw[j::8] for j in kept])
    return False, _BYTE[mask] + b"".join([planes[j] for j in kept])


def decode_words(r: Reader, n: int, changed: bool, what: str) -> bytes:
    """The inverse of :func:`encode_words`: ``n`` little-endian 64-bit words."""
    flags = b""
    k = n
    if changed:
        flags, k = read_flags(r, n, f"{what} changed bitmap")
    start = r.pos
    mask = r.u8(f"{what} plane mask")
    if mask == 0 and changed:
        raise r.fail(f"{what}: changed bitmap with no planes", start)
    kept = [j for j in range(8) if mask >> j & 1]
    data = r.take(len(kept) * k, what)
    full = bytearray(8 * k)
    for i, j in enumerate(kept):
        full[j::8] = data[i * k : (i + 1) * k]
    if not changed:
        return bytes(full)
    return codec("Q", n).pack(*spread(flags, codec("Q", k).unpack(full), 0))


# What the column decoders use to turn stored residuals back into values.
Expand = Callable[[bytes, Sequence[int], int], list[int]]
