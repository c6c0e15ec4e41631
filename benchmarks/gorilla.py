"""A faithful Gorilla baseline (Pelkonen et al., "Gorilla: A Fast, Scalable, In-Memory Time Series
Database", VLDB 2015, section 4.1), bit-packed, so the frame codec is compared with the real thing.

Per series (one GPU's one metric) a block holds:

- the block start ``t-1`` (aligned to two hours) in 64 bits, the first timestamp as a delta
  from it, and the first value as its 64 raw bits;
- each later timestamp as a delta-of-delta ``D`` in the paper's buckets: ``0`` for D = 0,
  ``10`` + 7 bits for [-63, 64], ``110`` + 9 bits for [-255, 256], ``1110`` + 12 bits for
  [-2047, 2048], ``1111`` + 32 bits otherwise;
- each later value XORed with the previous one: ``0`` when equal; ``10`` + the meaningful
  bits when they fit the previous leading/trailing-zero window; else ``11`` + 5 bits of
  leading zeros + 6 bits of meaningful-bit count + the meaningful bits.

Two adaptations, both in Gorilla's favour or neutral: timestamps are integer milliseconds
(the paper uses seconds; our samples are sub-second, so the first delta takes 23 bits, what
two hours of milliseconds need, instead of 14), and no end-of-stream marker is written (the
point count is kept outside). Integers are stored as doubles, as Gorilla stores every value.
The bytes of a series are its bits rounded up to whole bytes; series keys are not counted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

BLOCK_MS = 2 * 3600 * 1000
FIRST_DELTA_BITS = 23
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")


class BitWriter:
    """Most-significant-bit-first bit packing with a small accumulator flushed byte by byte."""

    def __init__(self) -> None:
        self._out = bytearray()
        self._acc = 0
        self._pending = 0
        self.bits = 0

    def write(self, value: int, nbits: int) -> None:
        self._acc = (self._acc << nbits) | (value & ((1 << nbits) - 1))
        self._pending += nbits
        self.bits += nbits
        while self._pending >= 8:
            self._pending -= 8
            self._out.append((self._acc >> self._pending) & 0xFF)
        self._acc &= (1 << self._pending) - 1

    def getvalue(self) -> bytes:
        if self._pending:
            return bytes(self._out) + bytes(((self._acc << (8 - self._pending)) & 0xFF,))
        return bytes(self._out)


class BitReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def read(self, nbits: int) -> int:
        start = self._pos >> 3
        end = (self._pos + nbits + 7) >> 3
        chunk = int.from_bytes(self._data[start:end], "big")
        shift = end * 8 - self._pos - nbits
        self._pos += nbits
        return (chunk >> shift) & ((1 << nbits) - 1)


def _bits(value: float) -> int:
    result: int = _U64.unpack(_F64.pack(value))[0]
    return result


def _signed(value: int, nbits: int) -> int:
    """The bucket's value back from its ``nbits`` (go-tsz's rule: the range is [-(2^(n-1)-1), 2^(n-1)])."""
    return value - (1 << nbits) if value > (1 << (nbits - 1)) else value


def encode_series(ts_ms: Sequence[int], values: Sequence[float]) -> BitWriter:
    """One Gorilla block for a series with at least one point."""
    w = BitWriter()
    start = ts_ms[0] - ts_ms[0] % BLOCK_MS
    w.write(start, 64)
    delta = ts_ms[0] - start
    w.write(delta, FIRST_DELTA_BITS)
    prev_bits = _bits(values[0])
    w.write(prev_bits, 64)
    prev_t = ts_ms[0]
    lead, trail = -1, 0
    for t, v in zip(ts_ms[1:], values[1:], strict=True):
        new_delta = t - prev_t
        dod = new_delta - delta
        if dod == 0:
            w.write(0, 1)
        elif -63 <= dod <= 64:
            w.write(0b10, 2)
            w.write(dod, 7)
        elif -255 <= dod <= 256:
            w.write(0b110, 3)
            w.write(dod, 9)
        elif -2047 <= dod <= 2048:
            w.write(0b1110, 4)
            w.write(dod, 12)
        else:
            w.write(0b1111, 4)
            w.write(dod, 32)
        delta, prev_t = new_delta, t
        bits = _bits(v)
        xor = bits ^ prev_bits
        prev_bits = bits
        if xor == 0:
            w.write(0, 1)
            continue
        new_lead = min(64 - xor.bit_length(), 31)
        new_trail = (xor & -xor).bit_length() - 1
        if lead >= 0 and new_lead >= lead and new_trail >= trail:
            w.write(0b10, 2)
            w.write(xor >> trail, 64 - lead - trail)
        else:
            lead, trail = new_lead, new_trail
            size = 64 - lead - trail
            w.write(0b11, 2)
            w.write(lead, 5)
            w.write(size & 63, 6)
            w.write(xor >> trail, size)
    return w


def decode_series(data: bytes, count: int) -> tuple[list[int], list[float]]:
    r = BitReader(data)
    start = r.read(64)
    delta = r.read(FIRST_DELTA_BITS)
    t = start + delta
    bits = r.read(64)
    ts = [t]
    values = [_F64.unpack(_U64.pack(bits))[0]]
    lead, trail = 0, 0
    for _ in range(count - 1):
        if r.read(1) == 0:
            dod = 0
        elif r.read(1) == 0:
            dod = _signed(r.read(7), 7)
        elif r.read(1) == 0:
            dod = _signed(r.read(9), 9)
        elif r.read(1) == 0:
            dod = _signed(r.read(12), 12)
        else:
            dod = r.read(32)
            if dod >= 1 << 31:
                dod -= 1 << 32
        delta += dod
        t += delta
        ts.append(t)
        if r.read(1):
            if r.read(1):
                lead = r.read(5)
                size = r.read(6) or 64
                trail = 64 - lead - size
            bits ^= r.read(64 - lead - trail) << trail
        values.append(_F64.unpack(_U64.pack(bits))[0])
    return ts, values
