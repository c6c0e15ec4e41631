"""One metric over a window: the column encodings and the per-column state between frames.

A frame stores each metric as a column over the window's records, which is both faster
(every step is a C-level pass over a list) and smaller (neighbouring values of one metric
are alike) than storing record by record. A column picks its encoding per frame from the
values it holds, and names it in a tag byte, so the decoder never needs the encoder's
catalog to read it:

``INT``      Python ints: delta of the previous value, byte planes.
``DECIMAL``  floats as ``k / 10**e`` (lossless when verified, else quantised): deltas of ``k``.
``QUANTUM``  floats as ``k * q`` for a catalog resolution that is not a power of ten.
``XOR``      any other floats, NaN and infinities included: Gorilla-style XOR, bit exact.
``RAW``      anything else (mixed int/float, integers past 2**62): one tagged scalar per value.
``ABSENT``   the metric is in the table but in none of this window's records.

The first value of a column is a delta from the previous frame's last value when the
previous frame used the same encoding and parameter (flag ``BASED``), so a slowly moving
metric costs a byte or two per frame. A keyframe never sets ``BASED``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from math import gcd
from operator import sub
from typing import Final

from telemetry.codec.gorilla_xor import MASK64, xor_decode, xor_encode, xor_value
from telemetry.codec.planes import (
    CONTAINER,
    SIGN_EXT,
    SIGNED_CODE,
    codec,
    expand_running,
    float64_bytes,
    narrowest,
    nonzero_flags,
    pack_bits,
    read_flags,
    read_signed,
    spread,
)
from telemetry.codec.planes import (
    FROM_ASCII01 as _FROM_ASCII01,
)
from telemetry.codec.scaling import MAX_EXPONENT, POW10, all_finite, lossless_decimal, quantise, quantise_decimal
from telemetry.codec.wire import Reader, scalar, svarint, uvarint

ABSENT = 0
INT = 1
DECIMAL = 2
QUANTUM = 3
XOR = 4
RAW = 5
TAG_NAMES = {ABSENT: "absent", INT: "int", DECIMAL: "decimal", QUANTUM: "quantum", XOR: "xor", RAW: "raw"}

F_PRESENCE = 1  # a presence bitmap follows: the metric is missing from some records
F_CHANGED = 2  # the residuals carry a changed bitmap (unchanged values cost one bit)
F_BASED = 4  # the first value is relative to the previous frame's last value
F_GCD = 8  # the residuals share a factor, sent once (clock steps of 15 MHz, memory in 256 MiB steps)
F_DOD = 16  # the residuals are delta-of-deltas after a first delta (counters that grow at a rate)
_KNOWN_FLAGS = F_PRESENCE | F_CHANGED | F_BASED | F_GCD | F_DOD

_LIMIT = 1 << 62  # first values and factors stay well inside what a 10-byte varint carries
_F64 = struct.Struct("<d")
_BYTE = tuple(bytes((i,)) for i in range(256))

# (tag, parameter, last integer) of a column after a frame: what the next frame's BASED refers to.
ColState = tuple[int, int | bytes | None, int]

# The block of a column whose every record repeats the previous frame's last value: nothing
# is written, the frame's sent bitmap says so.
REPEAT: Final = b""


class _Missing:
    """The placeholder for a metric a record does not carry."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """What the catalog says about one metric, worked out once per key.

    ``exponent`` is the decimal exponent of the resolution (3 for 0.001 W): the first
    exponent a lossless column tries, and the one a quantised column rounds to.
    ``quantum`` is a resolution that is no power of ten. ``counter`` columns also try
    delta-of-deltas: a counter's increments follow a rate (energy follows power).
    """

    exponent: int | None = None
    quantum: float | None = None
    counter: bool = False

    @classmethod
    def for_metric(cls, resolution: float, counter: bool) -> ColumnPlan:
        if not resolution > 0.0 or not math.isfinite(resolution):
            return cls(counter=counter)
        e = round(-math.log10(resolution))
        if 0 <= e <= MAX_EXPONENT and math.isclose(10.0**-e, resolution, rel_tol=1e-9):
            return cls(exponent=e, counter=counter)
        return cls(quantum=resolution, counter=counter)


NO_PLAN: Final = ColumnPlan()


ABSENT_BLOCK: Final = b"\x00\x00"


def _block(tag: int, payload: bytes) -> bytes:
    return _BYTE[tag] + uvarint(len(payload)) + payload


def encode_column(
    values: Sequence[object],
    complete: bool,
    plan: ColumnPlan,
    quantize: bool,
    state: ColState | None,
    missing: object = MISSING,
) -> tuple[bytes, ColState | None]:
    """The column's block (tag, payload length, payload), or REPEAT; and its state after this frame.

    ``values`` has ``missing`` where a record lacks the value; ``complete`` says the caller
    knows there is none (the common, fast case). Raises ValueError for a value that is
    not a number.
    """
    n = len(values)
    presence = b""
    present: Sequence[object]
    if complete:
        if state is not None and values.count(values[0]) == n and _repeats(values, state):
            return REPEAT, state
        present = values
    else:
        present = [v for v in values if v is not missing]
        if not present:
            return ABSENT_BLOCK, state
        if len(present) < n:
            presence = pack_bits(bytes([v is not missing for v in values]))
    flags = F_PRESENCE if presence else 0
    types = set(map(type, present))
    out: tuple[bytes, ColState] | None = None
    if types == _FLOAT:
        floats: Sequence[float] = present  # type: ignore[assignment]
        out = _encode_floats(floats, plan, quantize, flags, presence, state)
        if out is None:
            out = _encode_xor(floats, flags, presence, state)
    elif types == _INT:
        ints: Sequence[int] = present  # type: ignore[assignment]
        out = _encode_ints(INT, None, b"", ints, flags, presence, state, plan.counter)
    if out is not None:
        return out
    for v in present:
        if not isinstance(v, (int, float)):
            raise ValueError(f"metric value is not a number: {type(v).__name__} {v!r:.40}")
    return _block(RAW, _BYTE[flags] + presence + b"".join(map(scalar, present))), None


_FLOAT = {float}
_INT = {int}


def _repeats(values: Sequence[object], state: ColState) -> bool:
    """Whether equal ``values`` are, type and bits, the column's last value: the cheap way to REPEAT.

    Only a shortcut: a column that fails it can still come out as REPEAT the long way.
    """
    last = repeated_value(state)
    if type(values[0]) is not type(last) or values[0] != last or set(map(type, values)) != {type(last)}:
        return False
    # Equal floats have equal bits, but for the two zeros (NaN equals nothing, not even ``last``).
    return type(last) is not float or last != 0.0 or float64_bytes(values) == float64_bytes([last]) * len(values)  # type: ignore[arg-type]


def _encode_floats(
    values: Sequence[float], plan: ColumnPlan, quantize: bool, flags: int, presence: bytes, state: ColState | None
) -> tuple[bytes, ColState] | None:
    """DECIMAL or QUANTUM, or None when the floats are not finite or do not scale (XOR then)."""
    if not all_finite(values):
        return None
    try:
        if quantize and plan.exponent is not None:
            e = plan.exponent
            ks = quantise_decimal(values, e)
            return _encode_ints(DECIMAL, e, _BYTE[e], ks, flags, presence, state, plan.counter)
        if quantize and plan.quantum is not None:
            qbytes = _F64.pack(plan.quantum)
            ks = quantise(values, plan.quantum)
            return _encode_ints(QUANTUM, qbytes, qbytes, ks, flags, presence, state, plan.counter)
    except OverflowError:
        return None
    # Skip the probe of the first try when the last frame's column scaled with that exponent.
    hint = plan.exponent
    expected = hint is not None and state is not None and state[0] == DECIMAL and state[1] == hint
    found = lossless_decimal(values, hint, not expected)
    if found is None:
        return None
    e, ks = found
    return _encode_ints(DECIMAL, e, _BYTE[e], ks, flags, presence, state, plan.counter)


def _residuals(values: list[int]) -> tuple[int, bytes]:
    """(flags, bytes) of ``[factor] residual block``; OverflowError when a residual exceeds 64 bits.

    :func:`planes.encode_signed` with the common factor taken out first, in one function:
    a column's residuals are its most frequent work, and each call costs.
    """
    n = len(values)
    factor = gcd(*values)
    if factor == 0:  # every residual is 0
        return 0, b"\x00"
    flags = 0
    head = b""
    if 1 < factor < _LIMIT:
        if factor & (factor - 1):
            values = [v // factor for v in values]
        else:  # a power of two (the low bits of scaled doubles): a shift floors the same way
            shift = factor.bit_length() - 1
            values = [v >> shift for v in values]
        flags = F_GCD
        head = uvarint(factor)
    zeros = values.count(0)
    size, raw = narrowest(values)
    width = size
    while width > size // 2 + 1 and raw[width - 1 :: size] == raw[width - 2 :: size].translate(SIGN_EXT):
        width -= 1
    if zeros * width > (n + 7) >> 3:
        flags |= F_CHANGED
        head += pack_bits(nonzero_flags(raw, size, width))
        kept = list(filter(None, values))
        raw = codec(SIGNED_CODE[size], len(kept)).pack(*kept)
    if size == 1:
        return flags, head + _BYTE[width] + raw
    return flags, head + _BYTE[width] + b"".join([raw[j::size] for j in range(width)])


def _encode_ints(
    tag: int,
    param: int | bytes | None,
    param_bytes: bytes,
    ks: Sequence[int],
    flags: int,
    presence: bytes,
    state: ColState | None,
    counter: bool = False,
) -> tuple[bytes, ColState] | None:
    """Delta-coded integers; None when a first value or a delta leaves the range the wire carries."""
    k0 = ks[0]
    first = k0
    if state is not None and state[0] == tag and state[1] == param:
        flags |= F_BASED
        first = k0 - state[2]
    if not -_LIMIT < first < _LIMIT:
        return None
    m = len(ks)
    rest = b""
    if m > 1:
        if ks.count(k0) == m:  # no change within the window: every residual is 0
            rest = b"\x00"
        else:
            deltas = list(map(sub, ks[1:], ks))
            try:
                more, rest = _residuals(deltas)
                if counter and m > 2:
                    try:
                        dod_flags, dods = _residuals(list(map(sub, deltas[1:], deltas)))
                        dods = svarint(deltas[0]) + dods
                        if len(dods) < len(rest):
                            more, rest = dod_flags | F_DOD, dods
                    except OverflowError:
                        pass  # delta-of-deltas past 64 bits: the deltas do
            except OverflowError:
                return None
            flags |= more
    new_state = (tag, param, ks[-1])
    if first == 0 and flags == F_BASED and (rest == b"\x00" or not rest):
        return REPEAT, new_state
    z = first << 1 if first >= 0 else (~first << 1) | 1  # svarint(first), inline
    return _block(tag, _BYTE[flags] + presence + param_bytes + (_BYTE[z] if z < 0x80 else uvarint(z)) + rest), new_state


def _encode_xor(
    values: Sequence[float], flags: int, presence: bytes, state: ColState | None
) -> tuple[bytes, ColState]:
    base = 0
    if state is not None and state[0] == XOR:
        flags |= F_BASED
        base = state[2]
    first, changed, rest, last = xor_encode(values, base)
    if changed:
        flags |= F_CHANGED
    if first == 0 and flags == F_BASED and (rest == b"\x00" or not rest):
        return REPEAT, (XOR, None, last)
    return _block(XOR, _BYTE[flags] + presence + uvarint(first) + rest), (XOR, None, last)


def repeated_value(state: ColState | None) -> object:
    """The last value of a column, as the decoder produced it; None for a column without one."""
    if state is None:
        return None
    tag, param, last = state
    if tag == INT:
        return last
    if tag == DECIMAL and isinstance(param, int):
        return last / POW10[param]
    if tag == QUANTUM and isinstance(param, bytes):
        return last * _F64.unpack(param)[0]
    if tag == XOR:
        return xor_value(last)
    return None


class BaseUnknown(Exception):
    """A column is relative to a value this decoder skipped earlier: drop the column, not the frame."""


# The state of a column whose last frame the decoder skipped (unknown tag): BASED frames of it
# raise BaseUnknown until a frame that is not BASED brings it back.
UNKNOWN: Final[ColState] = (-1, None, 0)


def read_column(
    r: Reader, n: int, state: ColState | None, keyframe: bool, skip: bool = False
) -> tuple[Sequence[object] | None, ColState | None, bool]:
    """Read one column block: (values or None when skipped, state after it, whether none is MISSING).

    A column is skipped when the caller says so (a field id it does not know), when it is
    ABSENT, when its tag is newer than this decoder, or when it is BASED on a value the
    decoder skipped before; the block's length makes skipping possible.
    """
    at = r.pos
    data = r.data
    if at + 2 < r.end and data[at] in _TYPED and not skip:
        # The common block, a typed column: decoded in one function.
        size = data[at + 1]
        start = at + 2
        if size >= 0x80:
            size, start = varint_at(data, at + 1, r.end)
        end = start + size
        if size >= 0 and end <= r.end:
            try:
                fast = (
                    _read_xor(data, start, end, n, state, keyframe)
                    if data[at] == XOR
                    else _read_typed(data, start, end, data[at], n, state, keyframe)
                )
            except BaseUnknown:
                r.pos = end
                return None, UNKNOWN, True
            if fast is not None:
                r.pos = end
                return fast
    tag = r.u8("column tag")
    size = r.length("column length")
    end = r.pos + size
    if skip:
        r.pos = end
        return None, state, True
    if tag == ABSENT:
        r.pos = end
        if size:
            raise r.fail("absent column has a payload", at)
        return None, state, True
    if tag > RAW:
        r.pos = end
        return None, UNKNOWN, True
    outer = r.end
    r.end = end  # the reader spans exactly the payload while the column is decoded
    try:
        return decode_column(tag, r, n, state, keyframe)
    except BaseUnknown:
        return None, UNKNOWN, True
    finally:
        r.end = outer
        r.pos = end


_TYPED = frozenset((INT, DECIMAL, QUANTUM, XOR))


def varint_at(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of a varint of up to 10 bytes within ``end``; (-1, pos) when malformed."""
    result = 0
    shift = 0
    for i in range(pos, min(end, pos + 10)):
        byte = data[i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i + 1
        shift += 7
    return -1, pos


def bits_at(data: bytes, pos: int, end: int, count: int) -> tuple[bytes, int, int] | None:
    """The bitmap of ``count`` bits at ``pos`` as 0/1 bytes, its number of ones, and the position after it.

    None when it runs past ``end`` or sets a bit beyond ``count`` (the fast readers then
    hand the block to :func:`decode_column`, which names the fault).
    """
    size = (count + 7) >> 3
    if pos + size > end:
        return None
    value = int.from_bytes(data[pos : pos + size], "little")
    if value >> count:
        return None
    return format(value, "b").zfill(count)[::-1].encode("ascii").translate(_FROM_ASCII01), value.bit_count(), pos + size


def _base(flags: int, keyframe: bool, state: ColState | None, tag: int, param: int | bytes | None) -> int | None:
    """What a block's first value is relative to: 0 unless BASED, then the column's last value.

    None when a BASED block cannot be read the fast way (in a keyframe, or on a column whose
    last frame had another encoding); raises BaseUnknown on a column the decoder skipped.
    """
    if not flags & F_BASED:
        return 0
    if keyframe:
        return None
    if state is UNKNOWN:
        raise BaseUnknown
    if state is None or state[0] != tag or state[1] != param:
        return None
    return state[2]


def _read_typed(
    data: bytes, pos: int, end: int, tag: int, n: int, state: ColState | None, keyframe: bool
) -> tuple[Sequence[object], ColState, bool] | None:
    """An INT, DECIMAL or QUANTUM payload ``data[pos:end]`` decoded at once; None for anything unusual.

    Only the well-formed blocks an encoder writes take this way: whatever it does not
    expect (a malformed or truncated part, an unknown flag, a multi-plane width it would
    need to check) makes it return None, and :func:`decode_column` reads the block again,
    step by step, with its exact error messages. It raises only BaseUnknown, as that does.
    """
    if pos >= end:
        return None
    flags = data[pos]
    pos += 1
    if flags & ~_KNOWN_FLAGS:
        return None
    presence = b""
    m = n
    if flags & F_PRESENCE:
        bits = bits_at(data, pos, end, n)
        if bits is None or not bits[1]:
            return None
        presence, m, pos = bits
    param: int | bytes | None = None
    exponent = 0
    quantum = 1.0
    if tag == DECIMAL:
        if pos >= end:
            return None
        exponent = data[pos]
        pos += 1
        if exponent > MAX_EXPONENT:
            return None
        param = exponent
    elif tag == QUANTUM:
        if pos + 8 > end:
            return None
        param = data[pos : pos + 8]
        pos += 8
        quantum = _F64.unpack(param)[0]
        if not (math.isfinite(quantum) and quantum > 0.0):
            return None
    changed = flags & F_CHANGED
    if changed and m == 1:
        return None
    base = _base(flags, keyframe, state, tag, param)
    if base is None:
        return None
    if pos < end and data[pos] < 0x80:
        z = data[pos]
        pos += 1
    else:
        z, pos = varint_at(data, pos, end)
        if z < 0:
            return None
    k0 = base + ((z >> 1) ^ -(z & 1))
    ks: list[int]
    if m == 1:
        if flags & (F_GCD | F_DOD) or pos != end:
            return None
        ks = [k0]
    else:
        dod = flags & F_DOD
        first_delta = 0
        if dod:
            if m < 3:
                return None
            z, pos = varint_at(data, pos, end)
            if z < 0:
                return None
            first_delta = (z >> 1) ^ -(z & 1)
        count = m - 2 if dod else m - 1
        factor = 1
        if flags & F_GCD:
            factor, pos = varint_at(data, pos, end)
            if factor < 2:
                return None
        where = b""
        k = count
        if changed:
            bits = bits_at(data, pos, end, count)
            if bits is None:
                return None
            where, k, pos = bits
        if pos >= end:
            return None
        width = data[pos]
        pos += 1
        if width == 0:
            if changed or pos != end:
                return None
            ks = list(accumulate(repeat(first_delta, m - 1), initial=k0)) if dod else [k0] * m
        else:
            if width > 8 or pos + width * k != end:
                return None
            stored = planes_at(data, pos, k, width)
            if factor > 1:
                stored = [x * factor for x in stored]
            if dod:
                deltas = (
                    expand_running(where, stored, first_delta)
                    if where
                    else list(accumulate(stored, initial=first_delta))
                )
                ks = list(accumulate(deltas, initial=k0))
            elif not where:
                ks = list(accumulate(stored, initial=k0))
            else:
                # Unchanged values share one object: fewer numbers to make (and to free later).
                sums = list(accumulate(stored, initial=k0))
                new_state: ColState = (tag, param, sums[-1])
                shared: list[object] = sums  # type: ignore[assignment]
                if tag == DECIMAL:
                    d = POW10[exponent]
                    shared = [s / d for s in sums]
                elif tag == QUANTUM:
                    shared = [s * quantum for s in sums]
                values = list(map(shared.__getitem__, accumulate(where, initial=0)))
                if presence:
                    return spread(presence, values, MISSING), new_state, False
                return values, new_state, True
    new_state = (tag, param, ks[-1])
    out: Sequence[object]
    if tag == INT:
        out = ks
    elif tag == DECIMAL:
        d = POW10[exponent]
        out = [k / d for k in ks]
    else:
        out = [k * quantum for k in ks]
    if presence:
        return spread(presence, out, MISSING), new_state, False
    return out, new_state, True


def _read_xor(
    data: bytes, pos: int, end: int, n: int, state: ColState | None, keyframe: bool
) -> tuple[Sequence[object], ColState, bool] | None:
    """An XOR payload ``data[pos:end]`` decoded at once; None for anything unusual (see :func:`_read_typed`)."""
    if pos >= end:
        return None
    flags = data[pos]
    pos += 1
    if flags & ~(F_PRESENCE | F_CHANGED | F_BASED):
        return None
    presence = b""
    m = n
    if flags & F_PRESENCE:
        bits = bits_at(data, pos, end, n)
        if bits is None or not bits[1]:
            return None
        presence, m, pos = bits
    changed = flags & F_CHANGED
    if changed and m == 1:
        return None
    base = _base(flags, keyframe, state, XOR, None)
    if base is None:
        return None
    if pos < end and data[pos] < 0x80:
        first = data[pos]
        pos += 1
    else:
        first, pos = varint_at(data, pos, end)
        if first < 0 or first > MASK64:
            return None
    x = first ^ base
    if m > 1:
        count = m - 1
        k = count
        where = b""
        if changed:
            bits = bits_at(data, pos, end, count)
            if bits is None:
                return None
            where, k, pos = bits
        if pos >= end:
            return None
        mask = data[pos]
        pos += 1
        if mask == 0 and changed:
            return None
        kept = [j for j in range(8) if mask >> j & 1]
        if pos + len(kept) * k != end:
            return None
        full = bytearray(8 * k)
        for i, j in enumerate(kept):
            full[j::8] = data[pos + i * k : pos + (i + 1) * k]
        if where:
            full = bytearray(codec("Q", count).pack(*spread(where, codec("Q", k).unpack(full), 0)))
        x |= int.from_bytes(full, "little") << 64
        total = 64 * m
        shift = 64
        while shift < total:
            x ^= x << shift
            shift <<= 1
        x &= (1 << total) - 1
    elif pos != end:
        return None
    values = codec("d", m).unpack(x.to_bytes(8 * m, "little"))
    new_state: ColState = (XOR, None, x >> (64 * (m - 1)))
    if presence:
        return spread(presence, values, MISSING), new_state, False
    return values, new_state, True


def planes_at(data: bytes, pos: int, k: int, width: int) -> Sequence[int]:
    """``k`` signed integers stored as ``width`` byte planes from ``data[pos]`` on."""
    if width == 1:
        return codec("b", k).unpack_from(data, pos)
    size = CONTAINER[width]
    full = bytearray(size * k)
    for j in range(width):
        full[j::size] = data[pos + j * k : pos + (j + 1) * k]
    if width < size:
        ext = data[pos + (width - 1) * k : pos + width * k].translate(SIGN_EXT)
        for j in range(width, size):
            full[j::size] = ext
    return codec(SIGNED_CODE[size], k).unpack(full)


def decode_column(
    tag: int, r: Reader, n: int, state: ColState | None, keyframe: bool
) -> tuple[Sequence[object], ColState | None, bool]:
    """Values (MISSING where absent), the column's state after this frame, and whether none is MISSING.

    ``r`` spans exactly the column's payload. Raises FrameError on corrupt input and
    :class:`BaseUnknown` when the column is BASED on the :data:`UNKNOWN` state.
    """
    start = r.pos
    flags = r.u8("column flags")
    if flags & ~_KNOWN_FLAGS:
        raise r.fail(f"unknown column flags {flags:#x}", start)
    presence = b""
    m = n
    if flags & F_PRESENCE:
        presence, m = read_flags(r, n, "presence bitmap")
        if m == 0:
            raise r.fail("presence bitmap is empty", start)
    values: Sequence[object]
    new_state: ColState | None
    if tag == RAW:
        if flags & (F_CHANGED | F_BASED):
            raise r.fail("raw column with changed or based flag", start)
        values = [r.scalar("raw value") for _ in range(m)]
        new_state = None
    else:
        values, new_state = _decode_typed(tag, r, m, flags, state, keyframe, start)
    if r.pos != r.end:
        raise r.fail(f"{r.remaining} unread bytes in {TAG_NAMES[tag]} column")
    if presence:
        return spread(presence, values, MISSING), new_state, False
    return values, new_state, True


def _decode_typed(
    tag: int, r: Reader, m: int, flags: int, state: ColState | None, keyframe: bool, start: int
) -> tuple[Sequence[object], ColState]:
    param: int | bytes | None = None
    exponent = 0
    quantum = 1.0
    if tag == DECIMAL:
        exponent = r.u8("decimal exponent")
        if exponent > MAX_EXPONENT:
            raise r.fail(f"decimal exponent {exponent} exceeds {MAX_EXPONENT}", r.pos - 1)
        param = exponent
    elif tag == QUANTUM:
        param = r.take(8, "quantum")
        quantum = _F64.unpack(param)[0]
        if not (math.isfinite(quantum) and quantum > 0.0):
            raise r.fail(f"quantum {quantum!r} is not a positive number", r.pos - 8)
    changed = bool(flags & F_CHANGED)
    if changed and m == 1:
        raise r.fail("changed bitmap on a single value", start)
    if tag == XOR and flags & (F_GCD | F_DOD):
        raise r.fail("xor column with a residual factor or delta-of-deltas", start)
    base = 0
    if flags & F_BASED:
        if keyframe:
            raise r.fail("keyframe column refers to a previous frame", start)
        if state is UNKNOWN:
            raise BaseUnknown
        if state is None or state[0] != tag or state[1] != param:
            had = "nothing" if state is None else TAG_NAMES.get(state[0], str(state[0]))
            raise r.fail(f"{TAG_NAMES[tag]} column is based on a previous frame that sent {had}", start)
        base = state[2]
    if tag == XOR:
        first_at = r.pos
        first = r.uvarint("first xor")
        if first > MASK64:
            raise r.fail("first xor exceeds 64 bits", first_at)
        floats, last = xor_decode(r, m, first, changed, base)
        return floats, (XOR, None, last)
    k0 = base + r.svarint("first value")
    ks: list[int]
    if m > 1:
        dod = flags & F_DOD
        first_delta = 0
        if dod:
            first_delta = r.svarint("first delta")
            if m < 3:
                raise r.fail("delta-of-deltas need three values", start)
        count = m - 2 if dod else m - 1
        factor = 1
        if flags & F_GCD:
            at = r.pos
            factor = r.uvarint("residual factor")
            if factor < 2:
                raise r.fail(f"residual factor {factor} below 2", at)
        where, stored = read_signed(r, count, changed, "residuals")
        if stored is None:  # every residual is 0
            ks = list(accumulate(repeat(first_delta, m - 1), initial=k0)) if dod else [k0] * m
        else:
            if factor > 1:
                stored = tuple([x * factor for x in stored])
            if dod:
                deltas = (
                    list(accumulate(stored, initial=first_delta))
                    if where is None
                    else expand_running(where, stored, first_delta)
                )
                ks = list(accumulate(deltas, initial=k0))
            elif where is None:
                ks = list(accumulate(stored, initial=k0))
            else:
                ks = expand_running(where, stored, k0)
    else:
        if flags & (F_GCD | F_DOD):
            raise r.fail("residual factor or delta-of-deltas on a single value", start)
        ks = [k0]
    new_state: ColState = (tag, param, ks[-1])
    if tag == INT:
        return ks, new_state
    if tag == DECIMAL:
        d = POW10[exponent]
        return [k / d for k in ks], new_state
    return [k * quantum for k in ks], new_state
