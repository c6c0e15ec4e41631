"""Frame encoder and decoder: one window of one GPU's records per frame, stateful per GPU stream.

A frame is ``header | body | CRC-32`` (see :mod:`header`); the body, zstd-compressed when
that makes it smaller, is::

    attributes   (attrs.py)      the descriptive fields, one byte when unchanged
    timestamps   (timestamps.py) delta-of-delta ticks; the first timestamp is in the header
    metric table                 keyframe: column count, then per column its DCGM field id
                                 (varint), or 0 and the key as a string for keys not in the
                                 encoder's catalog. Delta frame: the column count and a bitmap
                                 of the columns sent; the columns are those of the last
                                 keyframe, in its order, and a column not sent repeats its
                                 last value in every record of the window.
    columns      (columns.py)    per column sent: tag u8, payload length varint, payload
    processes    (processes.py)  slots of process identities with their numbers as columns

Between frames both sides keep the same state: the table, each column's last value, the
last record's attributes and the process slots. A keyframe needs none of it, so a decoder
that starts mid-stream or lost a frame resynchronises at the next keyframe; a delta frame
whose base the decoder lacks (no keyframe yet, another GPU, a sequence gap) is refused with
a FrameError that says so, and leaves the decoder's state as it was. The encoder makes a
keyframe every ``keyframe_every`` frames, whenever a metric appears that the table lacks,
and after :meth:`FrameEncoder.force_keyframe`.

A decoder skips the columns of field ids its catalog lacks and columns whose encoding tag
it does not know (both carry their length), so agents and collectors can be upgraded in
either order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any

import zstandard

from telemetry.catalog import CATALOG, Metric, table_id
from telemetry.codec.attrs import Attrs, decode_attrs, encode_attrs
from telemetry.codec.columns import (
    ABSENT_BLOCK,
    MISSING,
    NO_PLAN,
    REPEAT,
    UNKNOWN,
    ColState,
    ColumnPlan,
    encode_column,
    read_column,
    repeated_value,
)
from telemetry.codec.errors import FrameError
from telemetry.codec.header import (
    FIRST_TS_BITS,
    FIRST_TS_OFFSET,
    FLAG_KEYFRAME,
    FLAG_QUANTISED,
    FLAG_ZSTD,
    MAX_RECORDS,
    FrameHeader,
    pack_gpu,
    pack_header,
    peek_header,
    with_crc,
)
from telemetry.codec.planes import pack_bits, read_bits
from telemetry.codec.processes import ProcessState, decode_processes, encode_processes
from telemetry.codec.timestamps import decode_timestamps, encode_timestamps
from telemetry.codec.wire import Reader, opt_string, uvarint
from telemetry.records import GpuRecord

MAX_BODY = 64 << 20  # a decompressed body larger than this is refused (a zstd bomb, or corruption)
_SEQ_MASK = 0xFFFFFFFF
_TS = attrgetter("ts")
_PROCESSES = attrgetter("processes")
_METRICS = attrgetter("metrics")


@dataclass(slots=True)
class _EncoderState:
    gpu: str
    gpu_bytes: bytes
    seq: int
    since_keyframe: int
    table: tuple[str, ...]
    keyset: frozenset[str]
    columns: list[ColState | None]
    attrs: Attrs
    processes: ProcessState


@dataclass(slots=True)
class _DecoderState:
    gpu: str
    seq: int
    keys: list[str | None]  # None: a field id this decoder does not know, skipped
    columns: list[ColState | None]
    attrs: Attrs
    processes: ProcessState


class FrameEncoder:
    """Encodes consecutive windows of one GPU's records into frames.

    ``quantize`` rounds floats to their catalog resolution (within half a quantum);
    without it every float comes back bit for bit. ``metrics`` is the catalog whose field
    ids and resolutions apply (the header's table id is 0 for any catalog but the built-in
    one). ``collect_stats`` adds up the bytes of each section and column in :attr:`stats`.
    """

    def __init__(
        self,
        quantize: bool = True,
        keyframe_every: int = 10,
        zstd_level: int | None = None,
        *,
        metrics: Sequence[Metric] = CATALOG,
        collect_stats: bool = False,
    ) -> None:
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be at least 1, got {keyframe_every}")
        if zstd_level is not None and not 1 <= zstd_level <= 22:
            raise ValueError(f"zstd level must be 1..22, got {zstd_level}")
        self.quantize = quantize
        self.keyframe_every = keyframe_every
        self._zstd = zstandard.ZstdCompressor(level=zstd_level) if zstd_level is not None else None
        self._field_ids, self._plans = catalog_maps(metrics)
        self._table_id = table_id() if metrics is CATALOG else 0
        self._flags = FLAG_QUANTISED if quantize else 0
        self._state: _EncoderState | None = None
        self._force = False
        self.stats: dict[str, int] | None = {} if collect_stats else None

    def force_keyframe(self) -> None:
        """Make the next frame a keyframe (after a frame was lost on the way, say)."""
        self._force = True

    def encode(self, records: Sequence[GpuRecord]) -> bytes:
        """One frame for ``records``: consecutive samples of this encoder's GPU, 1 to 65,535 of them.

        Raises ValueError for records of another GPU or values that are not numbers; the
        encoder's state is then unchanged.
        """
        n = len(records)
        if not 1 <= n <= MAX_RECORDS:
            raise ValueError(f"a frame holds 1 to {MAX_RECORDS} records, got {n}")
        gpu = records[0].gpu
        state = self._state
        if state is not None and state.gpu != gpu:
            raise ValueError(f"this encoder carries GPU {state.gpu!r}, not {gpu!r}: use one encoder per GPU")
        if any(r.gpu != gpu for r in records):
            raise ValueError(f"a frame holds one GPU's records; {gpu!r} is mixed with others")
        ts = list(map(_TS, records))
        if not set(map(type, ts)) <= {float, int}:
            raise ValueError("ts must be numbers")
        dicts: list[dict[str, float]] = list(map(_METRICS, records))
        window_keys, complete, cols = window_columns(dicts)
        prev = None if state is None or self._force or state.since_keyframe + 1 >= self.keyframe_every else state
        if prev is not None and not prev.keyset.issuperset(window_keys):
            prev = None  # a metric the table lacks: a keyframe
        keyframe = prev is None
        stats = self.stats
        parts: list[bytes] = []
        attrs, last_attrs = encode_attrs(records, None if prev is None else prev.attrs)
        parts.append(attrs)
        parts.append(encode_timestamps([float(t) for t in ts]))
        old: Sequence[ColState | None]
        if prev is None:
            table = window_keys
            old = [None] * len(table)
            parts.append(uvarint(len(table)) + b"".join(table_entry(self._field_ids, k) for k in table))
        else:
            table = prev.table
            old = prev.columns
            parts.append(uvarint(len(table)))
        if stats is not None:
            _add(stats, "attributes", len(parts[0]))
            _add(stats, "timestamps", len(parts[1]))
            _add(stats, "metric table", len(parts[2]) + (0 if keyframe else (len(table) + 7) >> 3))
        new_columns: list[ColState | None] = []
        sent = bytearray()
        blocks: list[bytes] = []
        quantize = self.quantize
        plans = self._plans
        for key, col_state in zip(table, old, strict=True):
            values = cols.get(key)
            if values is None:
                block, after = ABSENT_BLOCK, col_state
            else:
                block, after = encode_column(values, key in complete, plans.get(key, NO_PLAN), quantize, col_state)
            sent.append(block is not REPEAT)
            blocks.append(block)
            new_columns.append(after)
            if stats is not None:
                _add(stats, key, len(block))
        if not keyframe:
            parts.append(pack_bits(bytes(sent)))
        parts += blocks
        procs, proc_state = encode_processes(list(map(_PROCESSES, records)), None if prev is None else prev.processes)
        parts.append(procs)
        body = b"".join(parts)
        flags = self._flags | (FLAG_KEYFRAME if keyframe else 0)
        if self._zstd is not None:
            packed = self._zstd.compress(body)
            if len(packed) < len(body):
                body = packed
                flags |= FLAG_ZSTD
        seq = 0 if state is None else (state.seq + 1) & _SEQ_MASK
        gpu_bytes = pack_gpu(gpu) if state is None else state.gpu_bytes
        header = pack_header(flags, self._table_id, seq, n, ts[0], gpu_bytes)
        frame = with_crc(header + body)
        if stats is not None:
            _add(stats, "processes", len(procs))
            _add(stats, "header and checksum", len(header) + 4)
            _add(stats, "zstd saving", len(header) + len(b"".join(parts)) + 4 - len(frame))
            _add(stats, "records", n)
            _add(stats, "values", sum(map(len, dicts)))
        self._state = _EncoderState(
            gpu,
            gpu_bytes,
            seq,
            0 if prev is None else prev.since_keyframe + 1,
            table,
            frozenset(table) if prev is None else prev.keyset,
            new_columns,
            last_attrs,
            proc_state,
        )
        self._force = False
        return frame



def window_columns(dicts: list[dict[str, float]]) -> tuple[tuple[str, ...], set[str], dict[str, Sequence[object]]]:
    """The window's metric keys (in order of first appearance), those every record has, and each key's column.

    A column holds MISSING where a record lacks the key. Every step is a C loop. Records
    are grouped by their number of metrics: usually all records of one size have the same
    keys (the records that carry a metric only now and then are one size larger). That is
    checked as the values are fetched (a missing key raises KeyError, and a record of the
    right size with all of its group's keys has no others), and a window where it does not
    hold takes the slow, general way.
    """
    lengths = list(map(len, dicts))
    sizes = list(dict.fromkeys(lengths))
    reps = [tuple(dicts[lengths.index(size)]) for size in sizes]  # each group's first record's keys
    try:
        if len(reps) == 1:
            keys = reps[0]
            return keys, set(keys), _fetch(keys, dicts)
        window_keys = tuple(dict.fromkeys(chain.from_iterable(reps)))
        complete = set(reps[0]).intersection(*reps[1:])
        cols = _fetch(tuple(k for k in window_keys if k in complete), dicts)
        for size, keys in zip(sizes, reps, strict=True):
            sometimes = tuple(k for k in keys if k not in complete)
            if sometimes:  # every record of this size has these keys too (KeyError otherwise)
                _fetch(sometimes, compress(dicts, map(size.__eq__, lengths)))
    except KeyError:
        return _columns_general(dicts)
    get = dict.get
    for k in window_keys:
        if k not in complete:
            cols[k] = list(map(get, dicts, repeat(k), repeat(MISSING)))
    return window_keys, complete, cols


def _fetch(keys: tuple[str, ...], dicts: Iterable[dict[str, float]]) -> dict[str, Sequence[object]]:
    """The column of each key over ``dicts``; KeyError when a record lacks one."""
    if len(keys) > 1:
        return dict(zip(keys, zip(*map(itemgetter(*keys), dicts), strict=True), strict=True))
    if keys:
        return {keys[0]: list(map(itemgetter(keys[0]), dicts))}
    return {}


def _columns_general(
    dicts: list[dict[str, float]],
) -> tuple[tuple[str, ...], set[str], dict[str, Sequence[object]]]:
    """:func:`window_columns` for any window: keys counted record by record."""
    n = len(dicts)
    counts = Counter(chain.from_iterable(dicts))
    window_keys = tuple(counts)
    complete = {k for k, c in counts.items() if c == n}
    get = dict.get
    cols: dict[str, Sequence[object]] = {
        k: list(map(itemgetter(k), dicts)) if k in complete else list(map(get, dicts, repeat(k), repeat(MISSING)))
        for k in window_keys
    }
    return window_keys, complete, cols


# Metric dicts are built by a function per key tuple, made once. Its first keys are a dict
# display of constant keys (one BUILD_CONST_KEY_MAP, which makes the dict presized, in one
# step: up to 15 keys, beyond which CPython adds item by item), the others are stores into
# it. That is the fastest way CPython 3.11 has to make many dicts of the same keys;
# ``dict(zip(keys, row))`` makes a tuple per item and grows the dict key by key. The keys
# enter the source as ``repr`` literals, so no key can inject code.
_BUILDERS: dict[tuple[str, ...], Callable[..., dict[str, object]]] = {}
_MAX_BUILDERS = 256
_MAX_BUILDER_KEYS = 256  # wider tables use dict(zip(...))
_DISPLAY = 15


def dict_builder(keys: tuple[str, ...]) -> Callable[..., dict[str, object]]:
    build = _BUILDERS.get(keys)
    if build is None:
        if len(keys) > _MAX_BUILDER_KEYS:
            return partial(_zip_dict, keys)
        if len(_BUILDERS) >= _MAX_BUILDERS:
            _BUILDERS.clear()
        params = ", ".join(f"v{i}" for i in range(len(keys)))
        display = ", ".join(f"{key!r}: v{i}" for i, key in enumerate(keys[:_DISPLAY]))
        stores = "".join(f"    d[{key!r}] = v{i}\n" for i, key in enumerate(keys) if i >= _DISPLAY)
        namespace: dict[str, Any] = {}
        exec(f"def build({params}):\n    d = {{{display}}}\n{stores}    return d\n", namespace)
        build = _BUILDERS[keys] = namespace["build"]
    return build


def _zip_dict(keys: tuple[str, ...], *values: object) -> dict[str, object]:
    return dict(zip(keys, values, strict=True))


def catalog_maps(metrics: Sequence[Metric]) -> tuple[dict[str, int], dict[str, ColumnPlan]]:
    """Field id and column plan per key (shared, never changed, for the built-in catalog)."""
    if metrics is CATALOG and _BUILTIN_MAPS:
        return _BUILTIN_MAPS[0]
    return (
        {m.key: m.field_id for m in metrics},
        {m.key: ColumnPlan.for_metric(m.resolution, m.kind == "counter") for m in metrics},
    )


# Worked out once: an encoder is made per GPU stream.
_BUILTIN_MAPS: list[tuple[dict[str, int], dict[str, ColumnPlan]]] = []
_BUILTIN_MAPS.append(catalog_maps(CATALOG))


def _add(stats: dict[str, int], key: str, size: int) -> None:
    stats[key] = stats.get(key, 0) + size


class FrameDecoder:
    """Decodes the frames of one GPU stream, in order, into records.

    Raises FrameError, and only FrameError, for a frame it cannot decode; its state is
    then unchanged, so the next frame in sequence (or the next keyframe) still decodes.
    Field ids that ``metrics`` lacks are skipped and listed in :attr:`unknown_fields`.
    """

    def __init__(self, metrics: Sequence[Metric] = CATALOG) -> None:
        self._keys = {m.field_id: m.key for m in metrics}
        self._state: _DecoderState | None = None
        self._zstd = zstandard.ZstdDecompressor()
        self.unknown_fields: set[int] = set()

    @property
    def gpu(self) -> str | None:
        return None if self._state is None else self._state.gpu

    @property
    def expected_seq(self) -> int | None:
        """The sequence number a delta frame must carry next; None until a keyframe was decoded."""
        return None if self._state is None else (self._state.seq + 1) & _SEQ_MASK

    def decode(self, frame: bytes) -> list[GpuRecord]:
        return self.decode_checked(frame, peek_header(frame))

    def decode_checked(self, frame: bytes, hdr: FrameHeader) -> list[GpuRecord]:
        """:meth:`decode` for a frame whose header :func:`peek_header` returned (and checked) already."""
        state = self._state
        prev: _DecoderState | None = None
        if not hdr.keyframe:
            if state is None:
                raise FrameError(f"delta frame {hdr.seq} of {hdr.gpu} before any keyframe: waiting for a keyframe")
            if state.gpu != hdr.gpu:
                raise FrameError(f"delta frame of {hdr.gpu} given to the decoder of {state.gpu}")
            expected = (state.seq + 1) & _SEQ_MASK
            if hdr.seq != expected:
                raise FrameError(
                    f"sequence gap: expected frame {expected}, got {hdr.seq}; this delta frame's base "
                    "is missing, waiting for a keyframe"
                )
            prev = state
        elif state is not None and state.gpu != hdr.gpu:
            raise FrameError(f"keyframe of {hdr.gpu} given to the decoder of {state.gpu}")
        r = body_reader(frame, hdr.size, hdr.compressed, self._zstd)
        n = hdr.count
        attrs, last_attrs = decode_attrs(r, n, None if prev is None else prev.attrs)
        (first_bits,) = FIRST_TS_BITS.unpack_from(frame, FIRST_TS_OFFSET)
        ts = decode_timestamps(r, n, hdr.first_ts, first_bits)
        keys, states = self._read_table(r, prev)
        sent = "1" * len(keys) if prev is None else read_bits(r, len(keys), "sent-column bitmap")
        col_keys: list[str] = []
        cols: list[Sequence[object]] = []
        gaps: list[tuple[str, Sequence[object]]] = []  # columns some records lack
        for c, key in enumerate(keys):
            if sent[c] == "1":
                values, states[c], full = read_column(r, n, states[c], prev is None, key is None)
                if values is None or key is None:
                    continue
                if not full:
                    gaps.append((key, values))
            elif key is None or states[c] is UNKNOWN:
                continue
            else:
                value = repeated_value(states[c])
                if value is None:
                    raise r.fail(f"column {key} repeats a value the decoder does not have")
                values = [value] * n
            col_keys.append(key)
            cols.append(values)
        processes, proc_state = decode_processes(r, n, None if prev is None else prev.processes)
        if r.remaining:
            raise r.fail(f"{r.remaining} unread bytes after the process section")
        metrics = list(map(dict_builder(tuple(col_keys)), *cols)) if cols else [{} for _ in range(n)]
        for key, values in gaps:
            for d in compress(metrics, map(is_, values, repeat(MISSING))):
                del d[key]
        records = list(
            map(
                GpuRecord,
                ts,
                attrs[0],
                repeat(hdr.gpu),
                metrics,
                attrs[1],
                attrs[2],
                processes,
                attrs[3],
                attrs[4],
                attrs[5],
                attrs[6],
            )
        )
        self._state = _DecoderState(hdr.gpu, hdr.seq, keys, states, last_attrs, proc_state)
        return records

    def _read_table(self, r: Reader, prev: _DecoderState | None) -> tuple[list[str | None], list[ColState | None]]:
        at = r.pos
        # a keyframe's table entry takes at least a byte; a delta frame's column may take only
        # its bit in the sent bitmap (a column that repeats its last value)
        count = r.count("column count", r.remaining if prev is None else r.remaining * 8)
        if prev is not None:
            if count != len(prev.keys):
                raise r.fail(f"delta frame has {count} columns, its keyframe had {len(prev.keys)}", at)
            return prev.keys, list(prev.columns)
        return read_table_entries(r, count, self._keys, self.unknown_fields), [None] * count


def table_entry(field_ids: dict[str, int], key: str) -> bytes:
    """A keyframe's metric table entry: the catalog's field id, or 0 and the key itself."""
    field_id = field_ids.get(key)
    if field_id:
        return uvarint(field_id)
    if not isinstance(key, str):
        raise ValueError(f"metric key must be a string, got {key!r:.40}")
    return b"\x00" + opt_string(key)


def read_table_entries(r: Reader, count: int, keys_by_id: dict[int, str], unknown: set[int]) -> list[str | None]:
    """A keyframe's ``count`` metric table entries; None for a field id not in ``keys_by_id`` (added to
    ``unknown``: its column is skipped)."""
    keys: list[str | None] = []
    seen: set[str] = set()
    for _ in range(count):
        at = r.pos
        field_id = r.uvarint("field id")
        key: str | None
        if field_id:
            key = keys_by_id.get(field_id)
            if key is None:
                unknown.add(field_id)
        else:
            key = r.opt_string("metric key")
            if key is None:
                raise r.fail("metric key is null", at)
        if key is not None:
            if key in seen:
                raise r.fail(f"metric {key} appears twice in the table", at)
            seen.add(key)
        keys.append(key)
    return keys


def body_reader(frame: bytes, start: int, compressed: bool, zstd: zstandard.ZstdDecompressor) -> Reader:
    """A reader over a frame's body (from ``start`` to the checksum), decompressed when it is."""
    end = len(frame) - 4
    if not compressed:
        return Reader(frame, start, end)
    packed = frame[start:end]
    try:
        # The output buffer is sized from the zstd header when it declares a size: check it first.
        declared = zstandard.frame_content_size(packed)
        if declared > MAX_BODY:
            raise FrameError(f"zstd body declares {declared} bytes, more than {MAX_BODY}", start)
        body = zstd.decompress(packed, max_output_size=MAX_BODY)
    except zstandard.ZstdError as exc:
        raise FrameError(f"zstd body does not decompress: {exc}", start) from None
    return Reader(body, where="decompressed body")
