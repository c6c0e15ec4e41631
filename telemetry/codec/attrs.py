"""The records' descriptive fields (node, GPU index, model, PCI bus id, driver, MIG profile, parent GPU).

They hardly ever change within a stream, so a delta frame spends one byte on them: a mask
of the fields that differ from the previous frame's last record. A field in the mask is
written as runs (count, then length and value per run), so a driver upgrade in the middle
of a window still round-trips exactly. A keyframe writes every field.

Layout: mask u8 (bit i = field i follows); per field in the mask: runs (varint), then per
run its length (varint) and value: node and the strings as optional strings, gpu_index as
a scalar.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from telemetry.codec.wire import Reader, opt_string, scalar, uvarint
from telemetry.records import GpuRecord

FIELDS = ("node", "gpu_index", "model", "pci_bus_id", "driver_version", "mig_profile", "parent_gpu")
_GPU_INDEX = 1
ALL_FIELDS = (1 << len(FIELDS)) - 1
_GETTERS = tuple(attrgetter(name) for name in FIELDS)
_ALL = attrgetter(*FIELDS)

Attrs = tuple[object, ...]  # the last record's value of each field


def _value(field: int, value: object) -> bytes:
    if field == _GPU_INDEX:
        if value is not None and type(value) is not int:
            raise ValueError(f"gpu_index must be an int or None, got {value!r:.40}")
        return scalar(value)
    if value is None and field != 0:
        return b"\x00"
    if not isinstance(value, str):
        raise ValueError(f"{FIELDS[field]} must be a string, got {value!r:.40}")
    return opt_string(value)


def encode_attrs(records: Sequence[GpuRecord], prev: Attrs | None) -> tuple[bytes, Attrs]:
    n = len(records)
    if prev is not None:
        rows = list(map(_ALL, records))
        if rows.count(prev) == n:  # the usual delta frame: nothing changed
            return b"\x00", rows[-1]
    mask = 0
    parts = []
    last = []
    for field, getter in enumerate(_GETTERS):
        values = list(map(getter, records))
        last.append(values[-1])
        if prev is not None and values.count(prev[field]) == n:
            continue
        mask |= 1 << field
        if values.count(values[0]) == n:
            parts.append(b"\x01" + uvarint(n) + _value(field, values[0]))
            continue
        runs = []
        start = 0
        for i in range(1, n):
            if values[i] != values[start]:
                runs.append(uvarint(i - start) + _value(field, values[start]))
                start = i
        runs.append(uvarint(n - start) + _value(field, values[start]))
        parts.append(uvarint(len(runs)) + b"".join(runs))
    return bytes((mask,)) + b"".join(parts), tuple(last)


def decode_attrs(r: Reader, n: int, prev: Attrs | None) -> tuple[list[Sequence[object]], Attrs]:
    """Per field, the value of every record; and the last record's values."""
    at = r.pos
    mask = r.u8("attribute mask")
    if mask & ~ALL_FIELDS:
        raise r.fail(f"unknown attribute mask bits {mask:#x}", at)
    if prev is None and mask != ALL_FIELDS:
        raise r.fail("keyframe lacks some record attributes", at)
    base: Attrs = prev if prev is not None else ()
    columns: list[Sequence[object]] = []
    for field, name in enumerate(FIELDS):
        if not mask >> field & 1:
            columns.append([base[field]] * n)
            continue
        at = r.pos
        runs = r.count(f"{name} runs", n)
        values: list[object] = []
        for _ in range(runs):
            length = r.count(f"{name} run length", n - len(values))
            value: object
            if field == _GPU_INDEX:
                vat = r.pos
                value = r.scalar(name)
                if value is not None and type(value) is not int:
                    raise r.fail(f"gpu_index is {value!r}, not an integer", vat)
            else:
                value = r.opt_string(name)
                if field == 0 and value is None:
                    raise r.fail("node is missing", r.pos - 1)
            values.extend([value] * length)
        if len(values) != n or runs == 0:
            raise r.fail(f"{name} runs cover {len(values)} of {n} records", at)
        columns.append(values)
    return columns, tuple(col[-1] for col in columns)
