"""Bitmaps and byte planes: how a column of small integers becomes few bytes at C speed.

A window's residuals (deltas, delta-of-deltas, XORs) are mostly small. Instead of a
per-value varint loop in Python, a column is packed with one width for the whole column:
the values go through ``array`` as 64-bit words, and only the low ``w`` byte planes are
kept (plane ``j`` holds byte ``j`` of every value), which is a handful of slice operations
however long the column is. Keeping planes apart also hands zstd long runs of equal high
bytes. A bitmap of the nonzero positions replaces the zeros when that is smaller, so an
unchanged value costs one bit.

Bitmaps are least-significant-bit first: bit ``i`` is bit ``i % 8`` of byte ``i // 8``.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from telemetry.codec.wire import Reader

_LITTLE = sys.byteorder == "little"
_SIGN_EXT = bytes(0xFF if b & 0x80 else 0 for b in range(256))
_TO_ASCII01 = bytes.maketrans(b"\x00\x01", b"01")
_BYTE = tuple(bytes((i,)) for i in range(256))


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


def int64_bytes(values: Sequence[int]) -> bytes:
    return _signed_bytes(values, 8)


def bytes_int64(raw: bytes | bytearray) -> list[int]:
    arr = array("q")
    arr.frombytes(raw)
    if not _LITTLE:
        arr.byteswap()
    return arr.tolist()


def uint64_bytes(values: Sequence[int]) -> bytes:
    arr = array("Q", values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def bytes_uint64(raw: bytes | bytearray) -> list[int]:
    arr = array("Q")
    arr.frombytes(raw)
    if not _LITTLE:
        arr.byteswap()
    return arr.tolist()


def float64_bytes(values: Sequence[float]) -> bytes:
    arr = array("d", values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def bytes_float64(raw: bytes | bytearray) -> list[float]:
    arr = array("d")
    arr.frombytes(raw)
    if not _LITTLE:
        arr.byteswap()
    return arr.tolist()


def _typecode(size: int) -> str:
    return next(code for code in "bhilq" if array(code).itemsize == size)


# The native array holding a value of w bytes: widths 3, 5, 6 and 7 ride in the next size up.
_CONTAINER = (0, 1, 2, 4, 4, 8, 8, 8, 8)
_SIGNED_CODE = {size: _typecode(size) for size in (1, 2, 4, 8)}


def _signed_bytes(values: Sequence[int], size: int) -> bytes:
    arr = array(_SIGNED_CODE[size], values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def _narrowest(values: Sequence[int]) -> tuple[int, bytes]:
    """(container size, little-endian bytes) of the narrowest native array that takes every value.

    Trying the conversions is cheaper than ``min`` and ``max``: a wide column fails the
    narrow arrays at its first wide value.
    """
    for size in (1, 2, 4, 8):
        try:
            return size, _signed_bytes(values, size)
        except OverflowError:
            continue
    raise OverflowError("residual wider than 64 bits")


def encode_signed(values: list[int]) -> tuple[bool, bytes]:
    """Residuals as ``[changed bitmap] width planes``; says whether the bitmap is there.

    Raises OverflowError when a residual does not fit in 64 bits (the caller falls back).
    """
    n = len(values)
    zeros = values.count(0)
    if zeros == n:
        return False, b"\x00"
    size, raw = _narrowest(values)
    width = size
    while width > size // 2 + 1 and raw[width - 1 :: size] == raw[width - 2 :: size].translate(_SIGN_EXT):
        width -= 1
    bitmap = b""
    if zeros * width > (n + 7) >> 3:
        bitmap = pack_bits(bytes(map(bool, values)))
        raw = _signed_bytes(list(filter(None, values)), size)
    planes = raw if size == 1 else b"".join([raw[j::size] for j in range(width)])
    return bool(bitmap), bitmap + _BYTE[width] + planes


def decode_signed(r: Reader, n: int, changed: bool, what: str) -> list[int]:
    """The inverse of :func:`encode_signed` for ``n`` residuals."""
    if changed:
        bits = read_bits(r, n, f"{what} changed bitmap")
        k = bits.count("1")
    else:
        k = n
    start = r.pos
    width = r.u8(f"{what} width")
    if width == 0:
        if changed:
            raise r.fail(f"{what}: changed bitmap with zero width", start)
        return [0] * n
    if width > 8:
        raise r.fail(f"{what}: width {width} exceeds 8 bytes", start)
    data = r.take(width * k, what)
    size = _CONTAINER[width]
    arr = array(_SIGNED_CODE[size])
    if size == 1:
        arr.frombytes(data)
    else:
        full = bytearray(size * k)
        for j in range(width):
            full[j::size] = data[j * k : (j + 1) * k]
        if width < size:
            ext = data[(width - 1) * k : width * k].translate(_SIGN_EXT)
            for j in range(width, size):
                full[j::size] = ext
        arr.frombytes(full)
        if not _LITTLE:
            arr.byteswap()
    values = arr.tolist()
    if not changed:
        return values
    it = iter(values)
    return [next(it) if c == "1" else 0 for c in bits]


def encode_words(raw: bytes, n: int) -> tuple[bool, bytes]:
    """``n`` little-endian 64-bit words as ``[changed bitmap] plane-mask planes``; all-zero planes are dropped."""
    words = bytes_uint64(raw)
    zero_plane = bytes(n)
    planes = [raw[j::8] for j in range(8)]
    kept = [j for j in range(8) if planes[j] != zero_plane]
    if not kept:
        return False, b"\x00"
    if words.count(0) * len(kept) > (n + 7) >> 3:
        bitmap = pack_bits(bytes(map(bool, words)))
        raw = uint64_bytes(list(filter(None, words)))
        mask = sum(1 << j for j in kept)
        return True, bitmap + _BYTE[mask] + b"".join([raw[j::8] for j in kept])
    mask = sum(1 << j for j in kept)
    return False, _BYTE[mask] + b"".join([planes[j] for j in kept])


def decode_words(r: Reader, n: int, changed: bool, what: str) -> bytes:
    """The inverse of :func:`encode_words`: ``n`` little-endian 64-bit words."""
    if changed:
        bits = read_bits(r, n, f"{what} changed bitmap")
        k = bits.count("1")
    else:
        k = n
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
    it = iter(bytes_uint64(full))
    return uint64_bytes([next(it) if c == "1" else 0 for c in bits])
