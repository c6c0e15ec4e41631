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
from telemetry.codec.planes import pack_bits, read_bits
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
    repeats: dict[tuple[Identity, int], int] = {}  # later occurrences of it in the same record (rare)
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


def decode_processes(r: Reader, n: int, prev: ProcessState | None) -> tuple[list[list[ProcessRecord]], ProcessState]:
    """The inverse of :func:`encode_processes`; ``prev`` is None in a keyframe."""
    count = r.count("process slot count", r.remaining)
    lists: list[list[ProcessRecord]] = [[] for _ in range(n)]
    state = ProcessState()
    slot_rows: list[dict[int, ProcessRecord]] = []
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
        if mode & _PRESENCE_BITMAP:
            bits = read_bits(r, n, "process presence bitmap")
            rows = [i for i, c in enumerate(bits) if c == "1"]
            if not rows:
                raise r.fail("process present in no record", at)
        else:
            rows = list(range(n))
        columns: list[Sequence[Any]] = []
        new: list[ColState | None] = []
        for bit, col_state in zip(_SENT_BITS, old, strict=True):
            if mode & bit:
                values, after, _ = read_column(r, len(rows), col_state, prev is None)
            elif col_state is UNKNOWN:
                values, after = None, col_state
            else:
                value = repeated_value(col_state)
                if value is None:
                    raise r.fail("process column repeats a value the decoder does not have", at)
                values, after = [value] * len(rows), col_state
            columns.append([MISSING] * len(rows) if values is None else values)
            new.append(after)
        pid, pname, namespace, pod, container, service = key
        row_map: dict[int, ProcessRecord] = {}
        for i, mem, sm, mu in zip(rows, *columns, strict=True):
            proc = ProcessRecord(
                pid,
                pname,
                None if mem is MISSING else mem,
                None if sm is MISSING else sm,
                None if mu is MISSING else mu,
                namespace,
                pod,
                container,
                service,
            )
            lists[i].append(proc)
            row_map[i] = proc
        slot_rows.append(row_map)
        state.identities.append(key)
        state.columns.append(new)
    if count:
        at = r.pos
        order_mode = r.u8("process order")
        if order_mode == 1:
            lists = [_read_order(r, i, slot_rows, len(lists[i])) for i in range(n)]
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
