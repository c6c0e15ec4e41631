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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from math import gcd
from operator import floordiv, mul, sub, truediv
from typing import Final

from telemetry.codec.gorilla_xor import MASK64, xor_decode, xor_encode, xor_value
from telemetry.codec.planes import decode_signed, encode_signed, float64_bytes, pack_bits, read_bits
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
    if complete and state is not None and values.count(values[0]) == n and _repeats(values, state):
        return REPEAT, state
    presence = b""
    present: list[object]
    if complete:
        present = list(values)
    else:
        present = [v for v in values if v is not missing]
        if not present:
            return ABSENT_BLOCK, state
        if len(present) < n:
            presence = pack_bits(bytes([v is not missing for v in values]))
    flags = F_PRESENCE if presence else 0
    types = set(map(type, present))
    out: tuple[bytes, ColState] | None = None
    if types == {float}:
        floats: list[float] = present  # type: ignore[assignment]
        out = _encode_floats(floats, plan, quantize, flags, presence, state)
        if out is None:
            out = _encode_xor(floats, flags, presence, state)
    elif types == {int}:
        ints: list[int] = present  # type: ignore[assignment]
        out = _encode_ints(INT, None, b"", ints, flags, presence, state, plan.counter)
    if out is not None:
        return out
    for v in present:
        if not isinstance(v, (int, float)):
            raise ValueError(f"metric value is not a number: {type(v).__name__} {v!r:.40}")
    return _block(RAW, _BYTE[flags] + presence + b"".join(map(scalar, present))), None


def _repeats(values: Sequence[object], state: ColState) -> bool:
    """Whether equal ``values`` are, type and bits, the column's last value: the cheap way to REPEAT.

    Only a shortcut: a column that fails it can still come out as REPEAT the long way.
    """
    last = repeated_value(state)
    if type(values[0]) is not type(last) or values[0] != last or set(map(type, values)) != {type(last)}:
        return False
    return not isinstance(last, float) or float64_bytes(values) == float64_bytes([last]) * len(values)  # type: ignore[arg-type]


def _encode_floats(
    values: list[float], plan: ColumnPlan, quantize: bool, flags: int, presence: bytes, state: ColState | None
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
    found = lossless_decimal(values, plan.exponent)
    if found is None:
        return None
    e, ks = found
    return _encode_ints(DECIMAL, e, _BYTE[e], ks, flags, presence, state, plan.counter)


def _residuals(values: list[int]) -> tuple[int, bytes]:
    """(flags, bytes) of ``[factor] residual block``; OverflowError when a residual exceeds 64 bits."""
    flags = 0
    factor = gcd(*values)
    if 1 < factor < _LIMIT:
        values = list(map(floordiv, values, repeat(factor)))
        flags = F_GCD
    changed, block = encode_signed(values)
    if changed:
        flags |= F_CHANGED
    return flags, uvarint(factor) + block if flags & F_GCD else block


def _encode_ints(
    tag: int,
    param: int | bytes | None,
    param_bytes: bytes,
    ks: list[int],
    flags: int,
    presence: bytes,
    state: ColState | None,
    counter: bool = False,
) -> tuple[bytes, ColState] | None:
    """Delta-coded integers; None when a first value or a delta leaves the range the wire carries."""
    base = 0
    if state is not None and state[0] == tag and state[1] == param:
        flags |= F_BASED
        base = state[2]
    first = ks[0] - base
    if not -_LIMIT < first < _LIMIT:
        return None
    rest = b""
    if len(ks) > 1:
        deltas = list(map(sub, ks[1:], ks))
        try:
            more, rest = _residuals(deltas)
            if counter and len(deltas) > 1:
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
    if first == 0 and rest in (b"", b"\x00") and flags == F_BASED:
        return REPEAT, new_state
    return _block(tag, _BYTE[flags] + presence + param_bytes + svarint(first) + rest), new_state


def _encode_xor(values: list[float], flags: int, presence: bytes, state: ColState | None) -> tuple[bytes, ColState]:
    base = 0
    if state is not None and state[0] == XOR:
        flags |= F_BASED
        base = state[2]
    first, changed, rest, last = xor_encode(values, base)
    if changed:
        flags |= F_CHANGED
    if first == 0 and rest in (b"", b"\x00") and flags == F_BASED:
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
    tag = r.u8("column tag")
    size = r.count("column length", r.remaining)
    sub = Reader(r.data, r.pos, r.pos + size, r.where)
    r.pos += size
    if skip:
        return None, state, True
    if tag == ABSENT:
        if size:
            raise r.fail("absent column has a payload", at)
        return None, state, True
    if tag > RAW:
        return None, UNKNOWN, True
    try:
        return decode_column(tag, sub, n, state, keyframe)
    except BaseUnknown:
        return None, UNKNOWN, True


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
    if flags & F_PRESENCE:
        bits = read_bits(r, n, "presence bitmap")
        m = bits.count("1")
        if m == 0:
            raise r.fail("presence bitmap is empty", start)
    else:
        bits = ""
        m = n
    values: Sequence[object]
    new_state: ColState | None
    if tag == RAW:
        if flags & (F_CHANGED | F_BASED):
            raise r.fail("raw column with changed or based flag", start)
        values = [r.scalar("raw value") for _ in range(m)]
        new_state = None
    else:
        values, new_state = _decode_typed(tag, r, m, flags, state, keyframe, start)
    if r.remaining:
        raise r.fail(f"{r.remaining} unread bytes in {TAG_NAMES[tag]} column")
    if bits:
        it = iter(values)
        return [next(it) if c == "1" else MISSING for c in bits], new_state, False
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
    ks: Iterable[int]
    if m > 1:
        first_delta = r.svarint("first delta") if flags & F_DOD else 0
        if flags & F_DOD and m < 3:
            raise r.fail("delta-of-deltas need three values", start)
        count = m - 2 if flags & F_DOD else m - 1
        factor = 1
        if flags & F_GCD:
            at = r.pos
            factor = r.uvarint("residual factor")
            if factor < 2:
                raise r.fail(f"residual factor {factor} below 2", at)
        residuals = decode_signed(r, count, changed, "residuals")
        if factor > 1:
            residuals = list(map(mul, residuals, repeat(factor)))
        deltas = list(accumulate(residuals, initial=first_delta)) if flags & F_DOD else residuals
        ks = accumulate(deltas, initial=k0)
        last = k0 + sum(deltas)
    else:
        if flags & (F_GCD | F_DOD):
            raise r.fail("residual factor or delta-of-deltas on a single value", start)
        ks = (k0,)
        last = k0
    new_state: ColState = (tag, param, last)
    if tag == INT:
        return list(ks), new_state
    if tag == DECIMAL:
        return list(map(truediv, ks, repeat(POW10[exponent]))), new_state
    return list(map(mul, ks, repeat(quantum))), new_state
