"""Columns of a node frame: one metric over all of a node's GPUs, each value coded against its own GPU.

A node frame (:mod:`telemetry.codec.node`) carries every GPU's records of one flush. Its
columns hold a metric's values for all of them: GPU (slot) 0's records, then slot 1's, and
so on. Why one column for every GPU rather than a column per GPU: at 1 Hz a flush holds one
or two records per GPU, and a column's fixed cost (tag, length, flags, width) and the
decoder's per-column work were paid for each of them. Here they are paid once per node.

Why each value is coded against the previous value *of the same GPU* (its slot's last
value, kept between frames) and not against its neighbour in the column: a GPU's metric
rarely moves between two seconds, while two GPUs of a node differ (temperature, power,
clocks). The residuals are then mostly zero, which the residual block (planes.py) turns
into one bit each.

A block (``tag length payload``, the length lets a decoder skip it) is::

    typed (INT, DECIMAL, QUANTUM):
        flags:u8 [presence:bitmap(n)] [param] {first:svarint} [factor:varint] residuals
    RAW:
        flags:u8 [presence:bitmap(n)] {scalar}

``first``: one per slot that has a value here and no base (the block is not BASED, or the
slot had none): the slot's first integer itself. Every other value is a residual: the
delta from its slot's previous integer, or with DOD the change of that delta (counters
that grow at a rate). A column not sent at all repeats each slot's last value.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, compress, repeat
from math import gcd
from operator import add
from typing import Final

from telemetry.codec.columns import (
    ABSENT,
    ABSENT_BLOCK,
    DECIMAL,
    F_BASED,
    F_CHANGED,
    F_DOD,
    F_GCD,
    F_PRESENCE,
    INT,
    MISSING,
    QUANTUM,
    RAW,
    REPEAT,
    ColumnPlan,
    bits_at,
    planes_at,
    varint_at,
)
from telemetry.codec.planes import encode_signed, pack_bits, read_flags, read_signed, spread
from telemetry.codec.scaling import MAX_EXPONENT, POW10, all_finite, lossless_decimal, quantise, quantise_decimal
from telemetry.codec.wire import Reader, scalar, svarint, uvarint

_KNOWN_FLAGS: Final = F_PRESENCE | F_CHANGED | F_BASED | F_GCD | F_DOD
_LIMIT: Final = 1 << 63  # int64: a first value is then at most a 10-byte svarint
_F64 = struct.Struct("<d")
_BYTE = tuple(bytes((i,)) for i in range(256))

# A slot's segment of the frame's records: (slot, start, end), in slot order, each non-empty.
Segments = Sequence[tuple[int, int, int]]


class SlotState:
    """One column after a frame: its encoding, and each slot's last integer and last delta.

    Immutable once made (a decoder that fails keeps the state it had). ``ks[slot]`` is None
    for a slot that has had no value of this column since the keyframe.
    """

    __slots__ = ("_values", "ds", "ks", "param", "tag")

    def __init__(self, tag: int, param: int | bytes | None, ks: tuple[int | None, ...], ds: tuple[int, ...]) -> None:
        self.tag = tag
        self.param = param
        self.ks = ks
        self.ds = ds
        self._values: tuple[object, ...] | None = None

    def value(self, k: int) -> object:
        return _unscale(self.tag, self.param, k)

    def values(self) -> tuple[object, ...]:
        """Each slot's last value (None for a slot without one). Made once: a column that is not
        sent repeats these in every frame until it changes, and most columns at 1 Hz are not sent."""
        if self._values is None:
            tag, param = self.tag, self.param
            self._values = tuple(k if k is None or tag == INT else _unscale(tag, param, k) for k in self.ks)
        return self._values


class Layout:
    """A frame's records by slot, worked out once per frame.

    Every column of a frame has the same segments, so what a column without a presence bitmap
    needs per slot (each slot's count, each record's slot) is made here once instead of by a
    loop over the slots in each of the frame's columns.
    """

    __slots__ = ("counts", "rows", "segs", "single", "slots")

    def __init__(self, segs: Segments, nslots: int) -> None:
        self.segs = segs
        self.counts = [(slot, end - start) for slot, start, end in segs]
        self.rows = [slot for slot, start, end in segs for _ in range(end - start)]  # each record's slot
        self.slots = [slot for slot, _, _ in segs]
        # one record of every slot (segments are in slot order): a record's base is its slot's last
        self.single = len(segs) == nslots == len(self.rows)


# A column whose last block this decoder skipped (an encoding it does not know): its BASED
# blocks and repeats are dropped until a block that is not BASED brings it back.
LOST: Final = SlotState(-1, None, (), ())


def _unscale(tag: int, param: int | bytes | None, k: int) -> object:
    if tag == DECIMAL:
        assert isinstance(param, int)
        return k / POW10[param]
    if tag == QUANTUM:
        assert isinstance(param, bytes)
        return k * _F64.unpack(param)[0]
    return k


def _typed(values: list[object], plan: ColumnPlan, quantize: bool) -> tuple[int, int | bytes | None, list[int]] | None:
    """(tag, parameter, integers) for the present values, or None when only RAW holds them."""
    types = set(map(type, values))
    try:
        if types == {int}:
            ks = values
            tag, param = INT, None
        elif types == {float} and all_finite(values):  # type: ignore[arg-type]
            floats: list[float] = values  # type: ignore[assignment]
            if quantize and plan.exponent is not None:
                tag, param, ks = DECIMAL, plan.exponent, quantise_decimal(floats, plan.exponent)  # type: ignore[assignment]
            elif quantize and plan.quantum is not None:
                tag, param, ks = QUANTUM, _F64.pack(plan.quantum), quantise(floats, plan.quantum)  # type: ignore[assignment]
            else:
                found = lossless_decimal(floats, plan.exponent)
                if found is None:
                    return None
                tag, param, ks = DECIMAL, found[0], found[1]  # type: ignore[assignment]
        else:
            return None
    except OverflowError:
        return None
    ints: list[int] = ks  # type: ignore[assignment]
    if max(ints) >= _LIMIT or min(ints) <= -_LIMIT:
        return None
    return tag, param, ints


def encode_slot_column(
    values: Sequence[object], segs: Segments, nslots: int, plan: ColumnPlan, quantize: bool,
    state: SlotState | None, *, dod: bool = False, always: bool = False,
) -> tuple[bytes, SlotState | None]:
    """The block of one column over the frame's records (MISSING where a record lacks it), and its state after.

    Returns REPEAT (nothing to send) when every record repeats its slot's last value, unless
    ``always``; ABSENT_BLOCK when no record has the metric.
    """
    n = len(values)
    present = [v is not MISSING for v in values]
    m = sum(present)
    if m == 0:
        return ABSENT_BLOCK, state
    pv = list(compress(values, present)) if m < n else list(values)
    typed = _typed(pv, plan, quantize)
    if typed is None:
        return _raw_block(pv, present, m < n), None
    tag, param, ks = typed
    based = state is not None and state is not LOST and state.tag == tag and state.param == param
    old_ks: Sequence[int | None] = state.ks if based and state is not None else (None,) * nslots
    old_ds: Sequence[int] = state.ds if based and state is not None else (0,) * nslots
    new_ks = list(old_ks)
    new_ds = list(old_ds)
    firsts: list[int] = []
    residuals: list[int] = []
    repeat = not always and m == n
    pos = 0  # into ks
    for slot, start, end in segs:
        count = end - start if m == n else sum(present[start:end])
        if count == 0:
            continue
        k_prev, d_prev = new_ks[slot], new_ds[slot]
        for k in ks[pos : pos + count]:
            if k_prev is None:
                firsts.append(k)
                d_prev = 0
                repeat = False
            else:
                d = k - k_prev
                if d:
                    repeat = False
                residuals.append(d - d_prev if dod else d)
                d_prev = d
            k_prev = k
        new_ks[slot], new_ds[slot] = k_prev, d_prev
        pos += count
    if repeat:
        # every value is its slot's last: nothing is sent, and each slot's last delta is now 0
        ds = list(old_ds)
        for slot, _, _ in segs:
            ds[slot] = 0
        assert state is not None
        return REPEAT, SlotState(tag, param, state.ks, tuple(ds))
    flags = (F_PRESENCE if m < n else 0) | (F_BASED if based else 0) | (F_DOD if dod else 0)
    factor = 0
    for x in residuals:
        factor = gcd(factor, x)
        if factor == 1:
            break
    if factor >= 2:
        flags |= F_GCD
        residuals = [x // factor for x in residuals]
    try:
        changed, block = encode_signed(residuals) if residuals else (False, b"\x00")
    except OverflowError:
        return _raw_block(pv, present, m < n), None
    if changed:
        flags |= F_CHANGED
    parts = [_BYTE[flags]]
    if m < n:
        parts.append(pack_bits(bytes(present)))
    if tag == DECIMAL:
        assert isinstance(param, int)
        parts.append(_BYTE[param])
    elif tag == QUANTUM:
        assert isinstance(param, bytes)
        parts.append(param)
    parts.extend(map(svarint, firsts))
    if factor >= 2:
        parts.append(uvarint(factor))
    parts.append(block)
    payload = b"".join(parts)
    return _BYTE[tag] + uvarint(len(payload)) + payload, SlotState(tag, param, tuple(new_ks), tuple(new_ds))


def _raw_block(pv: list[object], present: list[bool], partial: bool) -> bytes:
    parts = [_BYTE[F_PRESENCE if partial else 0]]
    if partial:
        parts.append(pack_bits(bytes(present)))
    parts.extend(map(scalar, pv))
    payload = b"".join(parts)
    return _BYTE[RAW] + uvarint(len(payload)) + payload


def repeated_values(state: SlotState | None, layout: Layout) -> tuple[list[object] | None, SlotState | None]:
    """The values of a column not sent (each slot repeats its last), or None when it was lost; raises
    ValueError when the state cannot give them (the frame is then corrupt)."""
    if state is LOST:
        return None, state
    if state is None:
        raise ValueError("repeats a column that has no value yet")
    values = state.values()
    out = list(map(values.__getitem__, layout.rows))
    if None in out:
        slot = next(s for s in layout.slots if values[s] is None)
        raise ValueError(f"repeats GPU slot {slot}'s value of a column it never sent")
    ds = state.ds
    if not any(map(ds.__getitem__, layout.slots)):
        return out, state  # each slot's last delta is already 0: the state is unchanged
    zeroed = list(ds)
    for slot in layout.slots:
        zeroed[slot] = 0
    after = SlotState(state.tag, state.param, state.ks, tuple(zeroed))
    after._values = values
    return out, after


def read_slot_column(
    r: Reader, n: int, layout: Layout, nslots: int, state: SlotState | None, keyframe: bool, skip: bool,
) -> tuple[list[object] | None, SlotState | None]:
    """One block: (values with MISSING where absent, or None when skipped; the column's state after it)."""
    at = r.pos
    data = r.data
    segs = layout.segs
    if not skip and at + 2 < r.end and state is not None and state is not LOST and data[at] == state.tag \
            and data[at] in (INT, DECIMAL) and data[at + 1] < 0x80 and at + 2 + data[at + 1] <= r.end:
        # the usual block at 1 Hz: every GPU's value a delta from its last, read at once
        fast = _fast_based(data, at + 2, at + 2 + data[at + 1], n, layout, state)
        if fast is not None:
            r.pos = at + 2 + data[at + 1]
            return fast
    tag = r.u8("column tag")
    size = r.length("column length")
    end = r.pos + size
    if skip:
        r.pos = end
        return None, state
    if tag == ABSENT:
        if size:
            raise r.fail("absent column has a payload", at)
        return None, state
    if tag not in (INT, DECIMAL, QUANTUM, RAW):
        r.pos = end
        return None, LOST  # an encoding newer than this decoder
    outer = r.end
    r.end = end
    try:
        values, after = _read_payload(r, tag, n, segs, nslots, state, keyframe, at)
        if r.remaining:
            raise r.fail(f"{r.remaining} unread bytes in a column block", at)
        return values, after
    finally:
        r.end = outer
        r.pos = end


def _read_payload(
    r: Reader, tag: int, n: int, segs: Segments, nslots: int, state: SlotState | None, keyframe: bool, at: int,
) -> tuple[list[object] | None, SlotState | None]:
    flags = r.u8("column flags")
    if flags & ~_KNOWN_FLAGS or (tag == RAW and flags & ~F_PRESENCE):
        raise r.fail(f"unknown column flags {flags:#x}", at)
    present: bytes | None = None
    m = n
    if flags & F_PRESENCE:
        present, m = read_flags(r, n, "presence bitmap")
        if m == 0:
            raise r.fail("presence bitmap marks no record", at)
    if tag == RAW:
        raw: list[object] = [r.scalar("raw value") for _ in range(m)]
        return (raw if present is None else spread(present, raw, MISSING)), None
    param: int | bytes | None = None
    if tag == DECIMAL:
        param = r.u8("decimal exponent")
        if param > MAX_EXPONENT:
            raise r.fail(f"decimal exponent {param} exceeds {MAX_EXPONENT}", at)
    elif tag == QUANTUM:
        param = r.take(8, "quantum")
        q = _F64.unpack(param)[0]
        if not (q > 0.0 and q != float("inf")):
            raise r.fail(f"quantum {q} is not a positive finite number", at)
    based = bool(flags & F_BASED)
    if based:
        if keyframe:
            raise r.fail("a keyframe column is BASED on a previous frame", at)
        if state is LOST:
            return None, LOST  # relative to a block this decoder skipped
        if state is None or state.tag != tag or state.param != param:
            raise r.fail("column is BASED on a previous block of another encoding", at)
    ks_before: Sequence[int | None] = state.ks if based and state is not None else (None,) * nslots
    ds_before: Sequence[int] = state.ds if based and state is not None else (0,) * nslots
    # which slots have values here, how many, and which of them start without a base
    counts: list[tuple[int, int]] = []
    unbased = 0
    for slot, start, end in segs:
        c = end - start if present is None else present[start:end].count(1)
        if c:
            counts.append((slot, c))
            if ks_before[slot] is None:
                unbased += 1
    firsts = [r.svarint("first value") for _ in range(unbased)]
    factor = 1
    if flags & F_GCD:
        factor = r.uvarint("residual factor")
        if factor < 2:
            raise r.fail(f"residual factor {factor} is below 2", at)
    nres = m - unbased
    changed_flags, stored = read_signed(r, nres, bool(flags & F_CHANGED), "residuals")
    residuals: Sequence[int]
    if stored is None:
        residuals = (0,) * nres
    elif changed_flags is None:
        residuals = stored
    else:
        residuals = spread(changed_flags, stored, 0)  # type: ignore[assignment]
    if factor != 1:
        residuals = [x * factor for x in residuals]
    dod = bool(flags & F_DOD)
    ks_after = list(ks_before)
    ds_after = list(ds_before)
    ks: list[int]
    if not unbased and not dod and stored is not None:
        ks = _based_deltas(counts, residuals, ks_after, ds_after)
    else:
        ks = _expand(counts, residuals, ks_after, ds_after, firsts, dod, stored is None)
    if tag == DECIMAL:
        assert isinstance(param, int)
        p = POW10[param]
        out: list[object] = [k / p for k in ks]
    elif tag == QUANTUM:
        assert isinstance(param, bytes)
        q = _F64.unpack(param)[0]
        out = [k * q for k in ks]
    else:
        out = ks  # type: ignore[assignment]
    after = SlotState(tag, param, tuple(ks_after), tuple(ds_after))
    return (out if present is None else spread(present, out, MISSING)), after


def _based_deltas(counts: list[tuple[int, int]], residuals: Sequence[int], ks: list[int | None],
                  ds: list[int]) -> list[int]:
    """The integers of a column whose every value is a delta from its slot's previous one: one pass.

    Each slot's first residual is shifted by its base less where the running sum stood, so one
    ``accumulate`` over the whole column gives every value. ``ks`` and ``ds`` are updated.
    """
    adjusted = list(residuals)
    pos = 0
    last = 0  # the running sum at the end of the previous slot's run
    for slot, c in counts:
        base = ks[slot]
        assert base is not None
        adjusted[pos] += base - last
        end = pos + c
        last = base + sum(residuals[pos:end])
        ks[slot], ds[slot] = last, residuals[end - 1]
        pos = end
    return list(accumulate(adjusted))


def _expand(counts: list[tuple[int, int]], residuals: Sequence[int], ks_after: list[int | None], ds_after: list[int],
            firsts: list[int], dod: bool, zero: bool) -> list[int]:
    """The integers of a column, slot by slot (first values, delta-of-deltas). ``ks_after`` and
    ``ds_after`` are updated."""
    ks: list[int] = []
    fi = ri = 0
    for slot, c in counts:
        k, d = ks_after[slot], ds_after[slot]
        if k is None:
            k, d = firsts[fi], 0
            fi += 1
            ks.append(k)
            c -= 1
        if c == 0:
            pass
        elif zero:  # no value changed its delta: a flat run, or a counter at its rate
            if dod and d:
                ks.extend(range(k + d, k + d * c + (1 if d > 0 else -1), d))
                k += d * c
            else:
                ks.extend(repeat(k, c))
                d = d if dod else 0
        elif c == 1:
            x = residuals[ri]
            d = d + x if dod else x
            k += d
            ks.append(k)
        else:
            part = residuals[ri : ri + c]
            deltas = list(accumulate(part, initial=d))[1:] if dod else part
            d = deltas[-1]
            run = list(accumulate(deltas, initial=k))
            ks.extend(run[1:])
            k = run[-1]
        ri += c
        ks_after[slot], ds_after[slot] = k, d
    return ks


def _fast_based(data: bytes, pos: int, end: int, n: int, layout: Layout,
                state: SlotState) -> tuple[list[object], SlotState] | None:
    """A BASED INT or DECIMAL block whose every value has its slot's base, decoded in one pass; None for
    anything else or anything unusual (the block is then read step by step, with the exact error
    messages)."""
    flags = data[pos]
    pos += 1
    if flags & ~_KNOWN_FLAGS or not flags & F_BASED:
        return None
    tag = state.tag
    if tag == DECIMAL:
        if pos >= end or data[pos] != state.param:
            return None
        pos += 1
    present = b""
    m = n
    if flags & F_PRESENCE:
        bits = bits_at(data, pos, end, n)
        if bits is None or not bits[1]:
            return None
        present, m, pos = bits
    bases = state.ks
    if present:
        counts: list[tuple[int, int]] = []
        for slot, start, stop in layout.segs:
            c = present[start:stop].count(1)
            if c:
                if bases[slot] is None:
                    return None  # a first value: the general way
                counts.append((slot, c))
    elif None in map(bases.__getitem__, layout.slots):
        return None
    factor = 1
    if flags & F_GCD:
        factor, pos = varint_at(data, pos, end)
        if factor < 2:
            return None
    where = b""
    k = m
    if flags & F_CHANGED:
        bits = bits_at(data, pos, end, m)
        if bits is None or not bits[1]:
            return None
        where, k, pos = bits
    if pos >= end:
        return None
    width = data[pos]
    pos += 1
    dod = bool(flags & F_DOD)
    if width and (width > 8 or pos + width * k != end):
        return None
    if not width and (where or pos != end):
        return None
    if not present:
        counts = layout.counts
    ks_after: list[int | None] = list(bases)
    ds_after = list(state.ds)
    ks: list[int]
    if width == 0:
        ks = _expand(counts, (), ks_after, ds_after, [], dod, True)
    else:
        stored = planes_at(data, pos, k, width)
        if factor > 1:
            stored = [x * factor for x in stored]
        residuals: Sequence[int] = spread(where, stored, 0) if where else stored  # type: ignore[assignment]
        if dod:
            ks = _expand(counts, residuals, ks_after, ds_after, [], True, False)
        elif layout.single and not present:
            # one record of each GPU (1 Hz): its base plus its delta, and that delta is its last
            ks = list(map(add, bases, residuals))
            ks_after, ds_after = ks, residuals  # type: ignore[assignment]
        else:
            ks = _based_deltas(counts, residuals, ks_after, ds_after)
    after = SlotState(tag, state.param, tuple(ks_after), tuple(ds_after))
    out: list[object]
    if tag == DECIMAL:
        assert isinstance(state.param, int)
        p = POW10[state.param]
        out = [x / p for x in ks]
    else:
        out = ks  # type: ignore[assignment]
    return (spread(present, out, MISSING) if present else out), after
