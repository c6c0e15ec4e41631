"""A batch of records to COPY rows, column by column: the writer's fast path.

Why: converting value by value (``writer._sample_row``: a type check, a range check and a
call per metric) cost the collector about half of its CPU per GPU-sample. A batch from
an agent is regular: every value of an integer column is an ``int``, every value of a
float column a finite ``float``, every text plain ASCII. This module checks that
*per column*, with C-level loops (``map``, ``set``, ``min``/``max``, ``str.join``),
and builds the rows with one ``zip``.

It never decides that a record is bad. Whatever it does not expect (a float in an
integer column, a non-finite float it cannot place cheaply, an unknown metric key, a
string with a NUL byte or outside ASCII, a bool...) makes :func:`fast_rows` return
None, and the writer converts the batch the slow, exact way, which accepts what is
storable and names the field of what is not. So both ways store the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, Final

from collector.store.schema import BY_KEY, METRIC_COLUMNS
from telemetry.records import GpuRecord, ProcessRecord

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_KNOWN_KEYS: Final = frozenset(BY_KEY)
_INT_KEYS: Final = frozenset(c.key for c in METRIC_COLUMNS if c.sql_type == "bigint")
_NONE: Final = type(None)
_INT_TYPES: Final = frozenset({int, _NONE})
_FLOAT_TYPES: Final = frozenset({float, _NONE})
_NUMBER_TYPES: Final = frozenset({float, int, _NONE})
_TEXT_TYPES: Final = frozenset({str, _NONE})

_PRESENT = partial(is_not, None)
_TS = attrgetter("ts")
_GPU = attrgetter("gpu")
_NODE = attrgetter("node")
_METRICS = attrgetter("metrics")
_PROCESSES = attrgetter("processes")
_INVENTORY = attrgetter("model", "driver_version", "pci_bus_id", "mig_profile", "parent_gpu")
_PROC_TEXT = attrgetter("name", "namespace", "pod", "container", "service")
_PROC_NUM = attrgetter("used_memory_mib", "sm_util", "mem_util")

#: (samples, processes, inventory attributes per record) as the slow path makes them.
FastRows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[str | None, ...]]]


def _plain_text(values: Sequence[object], required: bool) -> bool:
    """All str (or None where allowed), ASCII, no NUL, none empty where required."""
    types = set(map(type, values))
    if not types <= (_TEXT_TYPES if not required else {str}):
        return False
    strings: list[Any] = list(values) if _NONE not in types else [v for v in values if v is not None]
    joined = "".join(strings)
    if not joined.isascii() or "\x00" in joined:
        return False
    return not required or all(strings)


def _int_column(values: list[Any], low: int = _INT64_MIN, high: int = _INT64_MAX) -> bool:
    types = set(map(type, values))
    if not types <= _INT_TYPES:
        return False
    if int in types:
        present = list(filter(_PRESENT, values)) if _NONE in types else values
        return bool(low <= min(present) and max(present) <= high)
    return True


def _float_column(values: list[Any]) -> list[Any] | None:
    """The column as floats (None kept, non-finite -> None); None when it is not plain numbers."""
    types = set(map(type, values))
    if not types <= _NUMBER_TYPES:
        return None
    if int in types:
        try:
            values = [v if v is None else float(v) for v in values]
        except OverflowError:
            return None
    if float in types or int in types:
        present = list(filter(_PRESENT, values)) if _NONE in types else values
        if not math.isfinite(sum(present)):  # a NaN or infinity somewhere (or a sum that overflowed)
            values = [v if v is None or math.isfinite(v) else None for v in values]
    return values


def _timestamps(values: list[Any]) -> list[datetime] | None:
    types = set(map(type, values))
    if not types <= {float, int}:
        return None
    try:
        return [datetime.fromtimestamp(v, UTC) for v in values]
    except (OverflowError, OSError, ValueError):
        return None


def fast_rows(records: Sequence[GpuRecord]) -> FastRows | None:
    """Rows for ``records`` when every column is plain; None otherwise (take the exact way)."""
    n = len(records)
    if not n:
        return [], [], []
    ts_col = _timestamps(list(map(_TS, records)))
    gpus = list(map(_GPU, records))
    nodes = list(map(_NODE, records))
    if ts_col is None or not _plain_text(gpus, True) or not _plain_text(nodes, True):
        return None
    dicts = list(map(_METRICS, records))
    if set(map(type, dicts)) != {dict}:
        return None
    if not all(map(_KNOWN_KEYS.issuperset, dicts)):
        return None  # extra keys go to the jsonb column: the exact way makes it
    columns: list[list[Any]] = []
    get = dict.get
    for col in METRIC_COLUMNS:
        values = list(map(get, dicts, repeat(col.key)))
        if col.key in _INT_KEYS:
            if not _int_column(values):
                return None
        else:
            floats = _float_column(values)
            if floats is None:
                return None
            values = floats
        columns.append(values)
    samples = list(zip(ts_col, gpus, nodes, *columns, repeat(None, n), strict=False))
    inventory = list(map(_INVENTORY, records))
    if not all(_plain_text(c, False) for c in zip(*inventory, strict=True)):
        return None
    processes = _process_rows(records, ts_col, gpus)
    if processes is None:
        return None
    return samples, processes, inventory


def _process_rows(
    records: Sequence[GpuRecord], ts_col: list[datetime], gpus: list[str]
) -> list[tuple[Any, ...]] | None:
    lists = list(map(_PROCESSES, records))
    count = sum(map(len, lists))
    if not count:
        return []
    procs: list[ProcessRecord] = [p for ps in lists for p in ps]
    if set(map(type, procs)) != {ProcessRecord}:
        return None
    where = [(t, g) for t, g, ps in zip(ts_col, gpus, lists, strict=True) for _ in ps]
    pids = [p.pid for p in procs]
    if not _int_column(pids, _INT32_MIN, _INT32_MAX) or None in pids:
        return None
    texts = list(map(_PROC_TEXT, procs))
    if not all(_plain_text(c, False) for c in zip(*texts, strict=True)):
        return None
    nums: list[list[Any]] = []
    for c in zip(*map(_PROC_NUM, procs), strict=True):
        floats = _float_column(list(c))
        if floats is None:
            return None
        nums.append(floats)
    return [
        (t, g, pid, *text, *num)
        for (t, g), pid, text, num in zip(where, pids, texts, zip(*nums, strict=True), strict=True)
    ]
