"""Wire primitives: varints, zigzag, optional strings, tagged scalars and a bounds-checked reader.

Everything the frame codec writes is built from these few shapes, so that every read is
checked in one place: a truncated or corrupt frame ends in :class:`FrameError` with the
offset of the read that failed, never in an ``IndexError`` or an endless loop.
"""

from __future__ import annotations

import struct

from telemetry.codec.errors import FrameError

_SMALL = tuple(bytes((i,)) for i in range(128))
_F64 = struct.Struct("<d")
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_VARINT_BYTES = 10  # 70 bits: any zigzagged int64, and a 64-bit word with a 3-bit tag
MAX_BIGINT_BYTES = 4096

# Scalar tags (low 3 bits of the scalar's leading varint).
_S_NONE = 0
_S_INT = 1
_S_FLOAT = 2
_S_BIGINT = 3


def zigzag(n: int) -> int:
    """Map signed to unsigned so that small magnitudes of either sign stay small."""
    return n << 1 if n >= 0 else (~n << 1) | 1


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def uvarint(n: int) -> bytes:
    """LEB128 of a non-negative int."""
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def svarint(n: int) -> bytes:
    return uvarint(zigzag(n))


def opt_string(value: str | None) -> bytes:
    """``None`` as 0, else (UTF-8 length + 1) and the bytes; lone surrogates survive (JSON allows them)."""
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8", "surrogatepass")
    return uvarint(len(raw) + 1) + raw


def scalar(value: object) -> bytes:
    """A tagged number or None: the lossless fallback for values that fit no column encoding."""
    if value is None:
        return b"\x00"
    if isinstance(value, float):
        return b"\x02" + _F64.pack(value)
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return uvarint((zigzag(value) << 3) | _S_INT)
        size = (value.bit_length() + 8) // 8
        return uvarint((size << 3) | _S_BIGINT) + value.to_bytes(size, "little", signed=True)
    raise ValueError(f"not a number: {type(value).__name__} {value!r:.40}")


class Reader:
    """A cursor over one buffer whose every read checks bounds and names what it was reading."""

    __slots__ = ("data", "end", "pos", "where")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None, where: str = "frame") -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.where = where

    def fail(self, reason: str, offset: int | None = None) -> FrameError:
        return FrameError(reason, self.pos if offset is None else offset, self.where)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def u8(self, what: str) -> int:
        if self.pos >= self.end:
            raise self.fail(f"truncated: {what} missing")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, n: int, what: str) -> bytes:
        if n > self.end - self.pos:
            raise self.fail(f"truncated: {what} needs {n} bytes, {self.end - self.pos} left")
        start = self.pos
        self.pos = start + n
        return self.data[start : self.pos]

    def uvarint(self, what: str) -> int:
        data, pos, end = self.data, self.pos, self.end
        if pos < end and data[pos] < 0x80:  # one byte: most counts, lengths and small values
            self.pos = pos + 1
            return data[pos]
        result = 0
        shift = 0
        for i in range(MAX_VARINT_BYTES):
            if pos + i >= end:
                raise self.fail(f"truncated: varint {what}")
            byte = data[pos + i]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos + i + 1
                return result
            shift += 7
        raise self.fail(f"varint {what} longer than {MAX_VARINT_BYTES} bytes")

    def svarint(self, what: str) -> int:
        return unzigzag(self.uvarint(what))

    def count(self, what: str, limit: int) -> int:
        """A varint count, refused when larger than ``limit`` (which the caller derives from the input)."""
        start = self.pos
        n = self.uvarint(what)
        if n > limit:
            raise self.fail(f"{what} {n} exceeds limit {limit}", start)
        return n

    def length(self, what: str) -> int:
        """A varint byte length, refused when more bytes than follow it: a block's end (``pos`` plus
        it) then never lies past the data (``count`` with ``remaining`` as its limit counted the
        varint's own bytes as room, so a truncated frame could end a block one byte past its data)."""
        start = self.pos
        n = self.uvarint(what)
        if n > self.end - self.pos:
            raise self.fail(f"truncated: {what} {n} is more than the {self.end - self.pos} bytes left", start)
        return n

    def f64(self, what: str) -> float:
        value: float = _F64.unpack(self.take(8, what))[0]
        return value

    def opt_string(self, what: str) -> str | None:
        start = self.pos
        n = self.uvarint(what)
        if n == 0:
            return None
        raw = self.take(n - 1, what)
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not UTF-8: {exc.reason}", start) from None

    def scalar(self, what: str) -> int | float | None:
        start = self.pos
        head = self.uvarint(what)
        tag = head & 7
        if tag == _S_INT:
            return unzigzag(head >> 3)
        if head == _S_NONE:
            return None
        if head == _S_FLOAT:
            return self.f64(what)
        if tag == _S_BIGINT:
            size = head >> 3
            if size > MAX_BIGINT_BYTES:
                raise self.fail(f"{what}: integer of {size} bytes exceeds {MAX_BIGINT_BYTES}", start)
            return int.from_bytes(self.take(size, what), "little", signed=True)
        raise self.fail(f"{what}: unknown scalar tag {head}", start)
