"""Process lists as slots: identities that come and go, and their numbers as columns.

A GPU's process list changes rarely in membership but its per-process numbers (memory,
SM and memory utilisation) change every sample. The window's processes are therefore
gathered into *slots*, one per process identity (pid, name, namespace, pod, container,
service): a slot says in which records the process is present (added/removed is a
change of that bitmap) and carries its three numbers as ordinary columns over those
records (changed entries are residuals of those columns). A slot that continues a slot
of the previous frame refers to it by index instead of repeating the identity, and its
columns are BASED on that slot's last values.

Layout: ``S`` (varint), then per slot: ``ref`` (varint: 0 = new identity follows, ``j + 1``
= slot ``j`` of the previous frame; keyframes use 0 only); a new identity is the pid as a
scalar, a byte whose bits 0-4 say which of name, namespace, pod, container, service are
present, and those strings; a mode byte (bit 0: a presence bitmap over the records
follows, else the process is in every record; bits 1-3: the used_memory_mib, sm_util and
mem_util columns are sent); the bitmap; the columns sent, over the records where the slot
is present, each ``tag, length, payload`` as in :mod:`columns`, a missing number being
absent. A column not sent repeats the previous frame's last value. When ``S > 0`` an order
byte follows: 0 when every record lists its processes in slot order, 1 when each record's
order is given as a count and slot indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Any

from telemetry.codec.columns import (
    MISSING,
    NO_PLAN,
    REPEAT,
    UNKNOWN,
    ColState,
    encode_column,
    read_column,
    repeated_value,
)
from telemetry.codec.planes import pack_bits, read_flags
from telemetry.codec.wire import Reader, opt_string, scalar, uvarint
from telemetry.records import ProcessRecord

# (pid, name, namespace, pod, container, service)
Identity = tuple[int, str | None, str | None, str | None, str | None, str | None]
_IDENTITY = attrgetter("pid", "name", "namespace", "pod", "container", "service")
_NUMBERS = attrgetter("used_memory_mib", "sm_util", "mem_util")
_PRESENCE_BITMAP = 0x01  # slot mode: a presence bitmap over the records follows
_SENT_BITS = (0x02, 0x04, 0x08)  # slot mode: used_memory_mib, sm_util, mem_util columns are sent
_KNOWN_MODE = 0x0F


@dataclass(slots=True)
class ProcessState:
    """The previous frame's slots: identities, the state of their three columns, and (encoder) an index."""

    identities: list[Identity] = field(default_factory=list)
    columns: list[list[ColState | None]] = field(default_factory=list)
    index: dict[Identity, int] = field(default_factory=dict)


def encode_processes(lists: Sequence[list[ProcessRecord]], prev: ProcessState | None) -> tuple[bytes, ProcessState]:
    """The process section of a window and the state the next frame refers to."""
    n = len(lists)
    slot_of: dict[Identity, int] = {}  # first occurrence of an identity in a record
    identities: list[Identity]
    rows: list[Sequence[int]]
    numbers: list[Sequence[tuple[object, object, object]]]
    orders: list[list[int]] = []
    in_order = True
    steady = _steady(lists)
    if steady is not None:
        # The usual window: every record lists the same processes in the same order.
        identities = list(steady)
        slot_of = {key: s for s, key in enumerate(identities)}
        everywhere = range(n)
        rows = [everywhere] * len(identities)
        flat = list(map(_NUMBERS, chain.from_iterable(lists)))
        k = len(identities)
        numbers = [flat[s::k] for s in range(k)]
    else:
        identities, rows, numbers, orders, in_order = _gather(lists, slot_of)
    parts = [uvarint(len(identities))]
    state = ProcessState(identities, [], slot_of)
    prev_index = prev.index if prev is not None else {}
    prev_columns = prev.columns if prev is not None else []
    for s, key in enumerate(identities):
        j = prev_index.get(key) if slot_of.get(key) == s else None  # repeats of an identity never refer back
        if j is None:
            old: list[ColState | None] = [None, None, None]
            mask = 0
            strings = []
            for bit, value in enumerate(key[1:]):
                if value is not None:
                    mask |= 1 << bit
                    strings.append(opt_string(value))
            parts.append(b"\x00" + scalar(key[0]) + bytes((mask,)) + b"".join(strings))
        else:
            old = prev_columns[j]
            parts.append(uvarint(j + 1))
        present = rows[s]
        bitmap = b""
        if len(present) < n:
            flags = bytearray(n)
            for i in present:
                flags[i] = 1
            bitmap = pack_bits(bytes(flags))
        mode = _PRESENCE_BITMAP if bitmap else 0
        blocks = []
        new: list[ColState | None] = []
        for bit, col, col_state in zip(_SENT_BITS, zip(*numbers[s], strict=True), old, strict=True):
            block, after = encode_column(col, None not in col, NO_PLAN, False, col_state, None)
            if block is not REPEAT:
                mode |= bit
                blocks.append(block)
            new.append(after)
        parts.append(bytes((mode,)) + bitmap + b"".join(blocks))
        state.columns.append(new)
    if identities:
        if in_order:
            parts.append(b"\x00")
        else:
            parts.append(b"\x01")
            for order in orders:
                parts.append(uvarint(len(order)) + b"".join(map(uvarint, order)))
    return b"".join(parts), state


def _steady(lists: Sequence[list[ProcessRecord]]) -> tuple[Identity, ...] | None:
    """The identities every record lists, in the same order and each once; None when records differ."""
    n = len(lists)
    lengths = list(map(len, lists))
    k = lengths[0]
    if lengths.count(k) != n:
        return None
    if k == 0:
        return ()
    identities = list(map(_IDENTITY, chain.from_iterable(lists)))
    first = identities[:k]
    if len(set(first)) != k or any(type(key[0]) is not int for key in first):
        return None
    if identities != first * n:
        return None
    return tuple(first)


def _gather(
    lists: Sequence[list[ProcessRecord]], slot_of: dict[Identity, int]
) -> tuple[list[Identity], list[Sequence[int]], list[Sequence[tuple[object, object, object]]], list[list[int]], bool]:
    """Slots of a window whose records differ: (identities, rows, numbers, per-record slot order, in order)."""
    repeats: dict[tuple[Identity, int], int] = {}  # later occurrences of an identity in the same record (rare)
    identities: list[Identity] = []
    rows: list[list[int]] = []
    numbers: list[list[tuple[object, object, object]]] = []
    orders: list[list[int]] = []
    in_order = True
    for i, procs in enumerate(lists):
        order: list[int] = []
        orders.append(order)
        for p in procs:
            key: Identity = _IDENTITY(p)
            s = slot_of.get(key)
            occurrence = 0
            while s is not None and rows[s][-1] == i:
                occurrence += 1
                s = repeats.get((key, occurrence))
            if s is None:
                if type(key[0]) is not int:
                    raise ValueError(f"process pid must be an int, got {key[0]!r:.40}")
                s = len(identities)
                if occurrence:
                    repeats[(key, occurrence)] = s
                else:
                    slot_of[key] = s
                identities.append(key)
                rows.append([])
                numbers.append([])
            if order and s < order[-1]:
                in_order = False
            order.append(s)
            rows[s].append(i)
            numbers[s].append(_NUMBERS(p))
    return identities, list(rows), list(numbers), orders, in_order


def decode_processes(r: Reader, n: int, prev: ProcessState | None) -> tuple[list[list[ProcessRecord]], ProcessState]:
    """The inverse of :func:`encode_processes`; ``prev`` is None in a keyframe."""
    count = r.count("process slot count", r.remaining)
    state = ProcessState()
    if not count:
        return [[] for _ in range(n)], state
    keyframe = prev is None
    slot_rows: list[Sequence[int]] = []
    slot_procs: list[list[ProcessRecord]] = []
    everywhere = range(n)
    partial = False  # some slot is missing from some records
    for _ in range(count):
        at = r.pos
        ref = r.uvarint("process slot reference")
        if ref:
            if prev is None or ref > len(prev.identities):
                raise r.fail(f"process slot refers to previous slot {ref - 1}, which does not exist", at)
            key = prev.identities[ref - 1]
            old = prev.columns[ref - 1]
        else:
            key = _read_identity(r)
            old = [None, None, None]
        at = r.pos
        mode = r.u8("process slot mode")
        if mode & ~_KNOWN_MODE:
            raise r.fail(f"unknown process slot mode {mode:#x}", at)
        rows: Sequence[int] = everywhere
        if mode & _PRESENCE_BITMAP:
            flags, p = read_flags(r, n, "process presence bitmap")
            if not p:
                raise r.fail("process present in no record", at)
            if p < n:
                rows = list(compress(everywhere, flags))
                partial = True
        p = len(rows)
        columns: list[Sequence[Any]] = []
        new: list[ColState | None] = []
        for bit, col_state in zip(_SENT_BITS, old, strict=True):
            if mode & bit:
                values, after, full = read_column(r, p, col_state, keyframe)
                if values is None:
                    values = [None] * p
                elif not full:
                    values = [None if v is MISSING else v for v in values]
            elif col_state is UNKNOWN:
                values, after = [None] * p, col_state
            else:
                value = repeated_value(col_state)
                if value is None:
                    raise r.fail("process column repeats a value the decoder does not have", at)
                values, after = [value] * p, col_state
            columns.append(values)
            new.append(after)
        pid, pname, namespace, pod, container, service = key
        mem, sm, mu = columns
        slot_procs.append(
            list(
                map(
                    ProcessRecord,
                    repeat(pid, p),
                    repeat(pname),
                    mem,
                    sm,
                    mu,
                    repeat(namespace),
                    repeat(pod),
                    repeat(container),
                    repeat(service),
                )
            )
        )
        slot_rows.append(rows)
        state.identities.append(key)
        state.columns.append(new)
    lists: list[list[ProcessRecord]]
    if partial:
        lists = [[] for _ in range(n)]
        for rows, procs in zip(slot_rows, slot_procs, strict=True):
            for i, proc in zip(rows, procs, strict=True):
                lists[i].append(proc)
    else:
        lists = list(map(list, zip(*slot_procs, strict=True)))
    at = r.pos
    order_mode = r.u8("process order")
    if order_mode == 1:
        by_row = [dict(zip(rows, procs, strict=True)) for rows, procs in zip(slot_rows, slot_procs, strict=True)]
        lists = [_read_order(r, i, by_row, len(lists[i])) for i in range(n)]
    elif order_mode != 0:
        raise r.fail(f"unknown process order mode {order_mode}", at)
    return lists, state


def _read_identity(r: Reader) -> Identity:
    at = r.pos
    pid = r.scalar("pid")
    if type(pid) is not int:
        raise r.fail(f"pid must be an integer, got {pid!r}", at)
    at = r.pos
    mask = r.u8("process string mask")
    if mask >> 5:
        raise r.fail(f"unknown process string mask {mask:#x}", at)
    strings: list[str | None] = []
    for bit in range(5):
        value = r.opt_string("process string") if mask >> bit & 1 else None
        if value is None and mask >> bit & 1:
            raise r.fail("process string marked present is null", at)
        strings.append(value)
    name, namespace, pod, container, service = strings
    return (pid, name, namespace, pod, container, service)


def _read_order(r: Reader, i: int, slot_rows: list[dict[int, ProcessRecord]], expected: int) -> list[ProcessRecord]:
    at = r.pos
    k = r.count("process order length", r.remaining)
    if k != expected:
        raise r.fail(f"record {i} orders {k} processes but has {expected}", at)
    out = []
    used: set[int] = set()
    for _ in range(k):
        s = r.count("process order slot", len(slot_rows) - 1)
        proc = slot_rows[s].get(i)
        if proc is None or s in used:
            raise r.fail(f"record {i} orders slot {s}, which is not present there or listed twice", at)
        used.add(s)
        out.append(proc)
    return out
