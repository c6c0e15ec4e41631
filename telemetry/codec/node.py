"""Node frames: every GPU's records of one flush of one node, in one frame.

Why (issue 16 items 3 and 5): at 1 Hz with a 1-s maximum delay a per-GPU frame holds one or
two records, so its fixed cost (header, GPU id, checksum, column table, a tag and a length
per column, a Kafka record with its key and headers) was paid per record: 3.2 bytes per
value on the Kafka log, and about 50 µs of collector CPU per record to decode. A node
frame pays those once per node and flush, and its columns (slots.py) cover all the node's
GPUs at once. The wire format is in docs/codec.md ("Node frames").

A node frame is ``header | body | CRC-32``::

    header   "GN" version:u8 flags:u8 table_id:u32 seq:u32      (flags as a GPU frame's)
    body     keyframe: ngpus:varint {gpu id} ncols:varint {field id [key]}
             delta:    ngpus:varint ncols:varint                 (both as in the keyframe)
             counts    one varint per GPU slot: its records in this frame (0 allowed)
             attrs     per slot with records: its attributes (attrs.py, against its last)
             ts        a slot block (slots.py) of the timestamps' IEEE bit patterns
             [sent]    delta frames: a bitmap of the columns that have a block
             columns   per column sent: a slot block
             processes per slot with records: its process section (processes.py)

With ``FLAG_DEFLATE`` the body is the next part of one raw deflate stream (level 6, 32 KiB
window) that the keyframe starts: the encoder ends each frame's part with a sync flush and
leaves out its fixed last four bytes (``00 00 ff ff``), which the decoder adds back. Why: a
body of ~570 bytes gives a compressor little to work with alone (zstd 3 per frame: 1.27 bytes
per value on the real traces, from 1.56), but coded against the frames before it, its tags,
lengths, flags and attributes repeat and its byte planes of small residuals are entropy-coded:
1.11 (docs/benchmarks.md). It adds no dependency between frames that delta coding does not
already make: a delta frame needs every frame since its keyframe either way. Why deflate and
not a zstd stream: zlib's contexts can be copied, so a refused frame leaves the decoder's
context as it was (a zstd stream was smaller only at level 19).

A node's records are ordered by slot, then by time. The GPUs of a node are its *slots*,
fixed by the keyframe; a GPU that appears makes the next frame a keyframe, and a periodic
keyframe drops the GPUs that sent nothing for a keyframe interval.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_

import zstandard

from telemetry.catalog import CATALOG, Metric, table_id
from telemetry.codec.attrs import Attrs, decode_attrs, encode_attrs
from telemetry.codec.columns import MISSING, NO_PLAN, REPEAT, ColumnPlan
from telemetry.codec.errors import FrameError
from telemetry.codec.frame import (
    MAX_BODY,
    body_reader,
    catalog_maps,
    dict_builder,
    read_table_entries,
    table_entry,
    window_columns,
)
from telemetry.codec.header import (
    CRC,
    FLAG_KEYFRAME,
    FLAG_QUANTISED,
    FLAG_ZSTD,
    MAX_RECORDS,
    checksum_ok,
    pack_gpu,
    read_gpu,
    with_crc,
)
from telemetry.codec.planes import codec, pack_bits, read_bits
from telemetry.codec.processes import ProcessState, decode_processes, encode_processes
from telemetry.codec.slots import (
    LOST,
    Layout,
    Segments,
    SlotState,
    encode_slot_column,
    read_slot_column,
    repeated_values,
)
from telemetry.codec.wire import Reader, uvarint
from telemetry.records import GpuRecord, ProcessRecord

NODE_MAGIC = b"GN"
NODE_VERSION = 1
NODE_FIXED = struct.Struct("<2sBBII")
MAX_SLOTS = 1024  # GPUs (and MIG instances) of one node
FLAG_DEFLATE = 0x08  # node frames only: the body continues the stream's deflate context (below)
_KNOWN_FLAGS = FLAG_KEYFRAME | FLAG_ZSTD | FLAG_QUANTISED | FLAG_DEFLATE
DEFLATE_LEVEL = 6
_DEFLATE_WBITS = -15  # raw deflate, a 32 KiB window: the last ~50 frames of a node stream
_SYNC_TAIL = b"\x00\x00\xff\xff"  # what every sync flush ends with: not sent, the decoder adds it back
_SEQ_MASK = 0xFFFFFFFF
_TS_PLAN = ColumnPlan(counter=True)
_METRICS = attrgetter("metrics")
_PROCESSES = attrgetter("processes")


def is_node_frame(frame: bytes) -> bool:
    return frame[:2] == NODE_MAGIC


@dataclass(frozen=True, slots=True)
class NodeHeader:
    keyframe: bool
    compressed: bool
    quantised: bool
    table_id: int
    seq: int
    size: int  # header bytes: the body starts here
    deflated: bool = False  # the body continues the stream's deflate context (FLAG_DEFLATE)


def peek_node_header(frame: bytes) -> NodeHeader:
    """The header of a node frame whose checksum is right; raises FrameError otherwise."""
    if len(frame) < NODE_FIXED.size + 3 + CRC.size:
        raise FrameError(f"node frame of {len(frame)} bytes is shorter than the smallest node frame", 0)
    magic, version, flags, table, seq = NODE_FIXED.unpack_from(frame)
    if magic != NODE_MAGIC:
        raise FrameError(f"bad magic {magic!r}, not a gpuwatch node frame", 0)
    if version != NODE_VERSION:
        raise FrameError(f"unsupported node frame version {version} (this decoder reads {NODE_VERSION})", 2)
    if not checksum_ok(frame):
        raise FrameError("checksum mismatch: the frame is corrupt", len(frame) - CRC.size)
    if flags & ~_KNOWN_FLAGS:
        raise FrameError(f"unknown frame flags {flags:#x}", 3)
    if flags & FLAG_ZSTD and flags & FLAG_DEFLATE:
        raise FrameError("frame flags say both zstd and deflate", 3)
    return NodeHeader(bool(flags & FLAG_KEYFRAME), bool(flags & FLAG_ZSTD), bool(flags & FLAG_QUANTISED),
                      table, seq, NODE_FIXED.size, bool(flags & FLAG_DEFLATE))


@dataclass(slots=True)
class _State:
    """What both sides hold after a frame."""

    seq: int
    gpus: tuple[str, ...]
    keys: tuple[str | None, ...]  # None: a field id the decoder does not know
    columns: list[SlotState | None]
    ts: SlotState | None
    attrs: list[Attrs | None]
    procs: list[ProcessState | None]
    inflater: zlib._Decompress | None = None  # the decoder's deflate context since the keyframe, if deflated


class NodeFrameEncoder:
    """Encodes one node's flushes (each GPU's pending records) into node frames."""

    def __init__(self, quantize: bool = True, keyframe_every: int = 60, zstd_level: int | None = None, *,
                 deflate: bool = False, metrics: Sequence[Metric] = CATALOG) -> None:
        """``deflate``: compress each body as the next part of one deflate stream per keyframe interval
        (``FLAG_DEFLATE``), so a frame's bytes are coded against the frames before it; see the class
        notes. Either it or ``zstd_level``, not both."""
        if keyframe_every < 1:
            raise ValueError(f"keyframe_every must be at least 1, got {keyframe_every}")
        if zstd_level is not None and not 1 <= zstd_level <= 22:
            raise ValueError(f"zstd level must be 1..22, got {zstd_level}")
        if deflate and zstd_level is not None:
            raise ValueError("a node frame encoder compresses with deflate or with zstd, not both")
        self.deflate = deflate
        self._deflater: zlib._Compress | None = None
        self.quantize = quantize
        self.keyframe_every = keyframe_every
        self._zstd = zstandard.ZstdCompressor(level=zstd_level) if zstd_level is not None else None
        self._field_ids, self._plans = catalog_maps(metrics)
        self._table_id = table_id() if metrics is CATALOG else 0
        self._state: _State | None = None
        self._since_keyframe = 0
        self._seen: dict[str, int] = {}  # frame number at which each GPU last had records
        self._frames = 0
        self._force = False

    def force_keyframe(self) -> None:
        self._force = True

    def encode(self, windows: Sequence[Sequence[GpuRecord]]) -> bytes:
        """One frame for ``windows``: each a non-empty run of one GPU's consecutive records, one run per GPU.

        Raises ValueError for anything a frame cannot carry; the encoder's state is then unchanged.
        """
        runs = [list(w) for w in windows if w]
        if not runs:
            raise ValueError("a node frame needs at least one record")
        gpus_here = [w[0].gpu for w in runs]
        if len(set(gpus_here)) != len(gpus_here):
            raise ValueError("a node frame holds one run of records per GPU")
        for w in runs:
            if any(r.gpu != w[0].gpu for r in w):
                raise ValueError(f"a run holds one GPU's records; {w[0].gpu!r} is mixed with others")
        total = sum(map(len, runs))
        if total > MAX_RECORDS:
            raise ValueError(f"a node frame holds at most {MAX_RECORDS} records, got {total}")
        flat_by_gpu = {w[0].gpu: w for w in runs}
        state = self._state
        frame_no = self._frames + 1
        prev = None if state is None or self._force or self._since_keyframe + 1 >= self.keyframe_every else state
        if prev is not None and not set(gpus_here) <= set(prev.gpus):
            prev = None
        gpus: tuple[str, ...]
        if prev is None:
            old = state.gpus if state is not None else ()
            keep = [g for g in old if g in flat_by_gpu or frame_no - self._seen.get(g, 0) <= self.keyframe_every]
            gpus = (*keep, *(g for g in gpus_here if g not in keep))
            if len(gpus) > MAX_SLOTS:
                raise ValueError(f"a node frame holds at most {MAX_SLOTS} GPUs")
        else:
            gpus = prev.gpus
        nslots = len(gpus)
        counts = [len(flat_by_gpu.get(g, ())) for g in gpus]
        flat: list[GpuRecord] = []
        segs: list[tuple[int, int, int]] = []
        for slot, g in enumerate(gpus):
            run = flat_by_gpu.get(g)
            if run:
                segs.append((slot, len(flat), len(flat) + len(run)))
                flat.extend(run)
        ts = [r.ts for r in flat]
        if not set(map(type, ts)) <= {float, int}:
            raise ValueError("ts must be numbers")
        window_keys, _, cols = window_columns(list(map(_METRICS, flat)))
        if prev is not None and not set(window_keys) <= set(prev.keys):
            prev = None  # a metric the table lacks: a keyframe (the GPU table stays)
        keyframe = prev is None
        parts: list[bytes] = [uvarint(nslots)]
        if keyframe:
            parts.extend(map(pack_gpu, gpus))
            table: tuple[str | None, ...] = window_keys
            parts.append(uvarint(len(table)) + b"".join(table_entry(self._field_ids, k) for k in window_keys))
            old_cols: Sequence[SlotState | None] = [None] * len(table)
            old_attrs: Sequence[Attrs | None] = [None] * nslots
            old_procs: Sequence[ProcessState | None] = [None] * nslots
            old_ts: SlotState | None = None
        else:
            assert prev is not None
            table = prev.keys
            parts.append(uvarint(len(table)))
            old_cols, old_attrs, old_procs, old_ts = prev.columns, prev.attrs, prev.procs, prev.ts
        parts.append(b"".join(map(uvarint, counts)))
        new_attrs = list(old_attrs)
        for slot, start, end in segs:
            block, new_attrs[slot] = encode_attrs(flat[start:end], old_attrs[slot])
            parts.append(block)
        bits = list(codec("q", len(ts)).unpack(codec("d", len(ts)).pack(*map(float, ts))))
        ts_block, new_ts = encode_slot_column(bits, segs, nslots, _TS_PLAN, False, old_ts, dod=True, always=True)
        parts.append(ts_block)
        sent = bytearray()
        blocks: list[bytes] = []
        new_cols: list[SlotState | None] = []
        for key, col in zip(table, old_cols, strict=True):
            values = cols.get(key) if key is not None else None
            if values is None or key is None:
                block, after = (b"\x00\x00", col)
            else:
                plan = self._plans.get(key, NO_PLAN)
                block, after = encode_slot_column(values, segs, nslots, plan, self.quantize, col, dod=plan.counter)
            sent.append(block is not REPEAT)
            blocks.append(block)
            new_cols.append(after)
        if not keyframe:
            parts.append(pack_bits(bytes(sent)))
        parts.extend(blocks)
        new_procs = list(old_procs)
        for slot, start, end in segs:
            block, new_procs[slot] = encode_processes(list(map(_PROCESSES, flat[start:end])), old_procs[slot])
            parts.append(block)
        body = b"".join(parts)
        flags = (FLAG_QUANTISED if self.quantize else 0) | (FLAG_KEYFRAME if keyframe else 0)
        if self.deflate:
            deflater = self._deflater
            if keyframe or deflater is None:  # (a stream's first frame is a keyframe)
                deflater = self._deflater = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, _DEFLATE_WBITS)
            body = deflater.compress(body) + deflater.flush(zlib.Z_SYNC_FLUSH)
            assert body.endswith(_SYNC_TAIL)
            body, flags = body[:-4], flags | FLAG_DEFLATE
        elif self._zstd is not None:
            packed = self._zstd.compress(body)
            if len(packed) < len(body):
                body, flags = packed, flags | FLAG_ZSTD
        seq = 0 if state is None else (state.seq + 1) & _SEQ_MASK
        frame = with_crc(NODE_FIXED.pack(NODE_MAGIC, NODE_VERSION, flags, self._table_id, seq) + body)
        self._state = _State(seq, gpus, table, new_cols, new_ts, new_attrs, new_procs)
        self._since_keyframe = 0 if keyframe else self._since_keyframe + 1
        self._frames = frame_no
        for g in gpus_here:
            self._seen[g] = frame_no
        if keyframe and len(self._seen) > 2 * len(gpus) + 16:
            self._seen = {g: self._seen[g] for g in gpus if g in self._seen}
        self._force = False
        return frame


class NodeFrameDecoder:
    """Decodes one node stream's frames, in order, into each GPU's records.

    Raises FrameError, and only FrameError, for a frame it cannot decode; its state is then
    unchanged, so the next frame in sequence (or the next keyframe) still decodes.
    """

    def __init__(self, metrics: Sequence[Metric] = CATALOG) -> None:
        self._keys = {m.field_id: m.key for m in metrics}
        self._state: _State | None = None
        self._zstd = zstandard.ZstdDecompressor()
        self.unknown_fields: set[int] = set()

    @property
    def expected_seq(self) -> int | None:
        return None if self._state is None else (self._state.seq + 1) & _SEQ_MASK

    @property
    def gpus(self) -> tuple[str, ...]:
        return () if self._state is None else self._state.gpus

    def decode(self, frame: bytes) -> list[list[GpuRecord]]:
        return self.decode_checked(frame, peek_node_header(frame))

    def decode_checked(self, frame: bytes, hdr: NodeHeader) -> list[list[GpuRecord]]:
        """Each GPU's records in the frame (one list per GPU that has any), for a checked header."""
        state = self._state
        prev: _State | None = None
        if not hdr.keyframe:
            if state is None:
                raise FrameError(f"delta node frame {hdr.seq} before any keyframe: waiting for a keyframe")
            expected = (state.seq + 1) & _SEQ_MASK
            if hdr.seq != expected:
                raise FrameError(f"sequence gap: expected frame {expected}, got {hdr.seq}; this delta frame's "
                                 "base is missing, waiting for a keyframe")
            prev = state
        inflater = None if prev is None else prev.inflater
        if hdr.deflated:
            r, inflater = _inflate(frame, hdr, inflater)
        else:
            r = body_reader(frame, hdr.size, hdr.compressed, self._zstd)
        return self._body(r, hdr, prev, inflater)

    def _body(self, r: Reader, hdr: NodeHeader, prev: _State | None,
              inflater: zlib._Decompress | None) -> list[list[GpuRecord]]:
        at = r.pos
        nslots = r.count("GPU count", MAX_SLOTS)
        if prev is None:
            if nslots == 0:
                raise r.fail("keyframe has no GPUs", at)
            gpus = tuple(read_gpu(r) for _ in range(nslots))
            if len(set(gpus)) != nslots:
                raise r.fail("a GPU appears twice in the keyframe's GPU table", at)
            keys = self._read_table(r)
            old_cols: Sequence[SlotState | None] = [None] * len(keys)
            old_attrs: Sequence[Attrs | None] = [None] * nslots
            old_procs: Sequence[ProcessState | None] = [None] * nslots
            old_ts: SlotState | None = None
        else:
            if nslots != len(prev.gpus):
                raise r.fail(f"delta frame has {nslots} GPUs, its keyframe had {len(prev.gpus)}", at)
            at = r.pos
            ncols = r.count("column count", r.remaining * 8)
            if ncols != len(prev.keys):
                raise r.fail(f"delta frame has {ncols} columns, its keyframe had {len(prev.keys)}", at)
            gpus, keys = prev.gpus, prev.keys
            old_cols, old_attrs, old_procs, old_ts = prev.columns, prev.attrs, prev.procs, prev.ts
        segs: list[tuple[int, int, int]] = []
        n = 0
        at = r.pos
        for slot in range(nslots):
            c = r.count("record count", MAX_RECORDS - n)
            if c:
                segs.append((slot, n, n + c))
                n += c
        if n == 0:
            raise r.fail("node frame holds no records", at)
        layout = Layout(segs, nslots)
        new_attrs = list(old_attrs)
        attr_cols: list[list[Sequence[object]]] = []
        for slot, start, end in segs:
            fields, new_attrs[slot] = decode_attrs(r, end - start, old_attrs[slot])
            attr_cols.append(fields)
        ts_bits, new_ts = read_slot_column(r, n, layout, nslots, old_ts, prev is None, False)
        if ts_bits is None or any(b is MISSING for b in ts_bits) or not all(type(b) is int for b in ts_bits):
            raise r.fail("timestamps are not a complete column of integers")
        try:
            ts = list(codec("d", n).unpack(codec("q", n).pack(*ts_bits)))
        except struct.error:
            raise r.fail("a timestamp is not a 64-bit pattern") from None
        sent = "1" * len(keys) if prev is None else read_bits(r, len(keys), "sent-column bitmap")
        col_keys: list[str] = []
        cols: list[Sequence[object]] = []
        gaps: list[tuple[str, Sequence[object]]] = []
        new_cols = list(old_cols)
        for c, key in enumerate(keys):
            got: list[object] | None
            if sent[c] == "1":
                got, new_cols[c] = read_slot_column(r, n, layout, nslots, old_cols[c], prev is None, key is None)
                if got is None or key is None:
                    continue
                if MISSING in got:
                    gaps.append((key, got))
            elif key is None:
                continue
            else:
                try:
                    got, new_cols[c] = repeated_values(old_cols[c], layout)
                except ValueError as exc:
                    raise r.fail(f"column {key} {exc}") from None
                if got is None:
                    continue
            col_keys.append(key)
            cols.append(got)
        new_procs = list(old_procs)
        proc_lists: list[list[list[ProcessRecord]]] = []
        for slot, start, end in segs:
            lists, new_procs[slot] = decode_processes(r, end - start, old_procs[slot])
            proc_lists.append(lists)
        if r.remaining:
            raise r.fail(f"{r.remaining} unread bytes after the process sections")
        metrics = list(map(dict_builder(tuple(col_keys)), *cols)) if cols else [{} for _ in range(n)]
        for key, values in gaps:
            for d in compress(metrics, map(is_, values, repeat(MISSING))):
                del d[key]
        out: list[list[GpuRecord]] = []
        for (slot, start, end), attrs, procs in zip(segs, attr_cols, proc_lists, strict=True):
            out.append(list(map(GpuRecord, ts[start:end], attrs[0], repeat(gpus[slot]), metrics[start:end],
                                attrs[1], attrs[2], procs, attrs[3], attrs[4], attrs[5], attrs[6])))
        self._state = _State(hdr.seq, gpus, keys, new_cols, new_ts, new_attrs, new_procs, inflater)
        return out

    def _read_table(self, r: Reader) -> tuple[str | None, ...]:
        count = r.count("column count", r.remaining)
        return tuple(read_table_entries(r, count, self._keys, self.unknown_fields))


def _inflate(frame: bytes, hdr: NodeHeader, context: zlib._Decompress | None) -> tuple[Reader, zlib._Decompress]:
    """The deflated body of ``frame``, and the stream's deflate context after it.

    A keyframe starts a context; a delta frame continues the one its predecessor left. The
    context is copied first, so a frame refused here or later leaves the stream's as it was.
    """
    if hdr.keyframe:
        inflater = zlib.decompressobj(_DEFLATE_WBITS)
    elif context is None:
        raise FrameError("a deflated delta frame, but this stream's frames since its keyframe were not deflated",
                         hdr.size)
    else:
        inflater = context.copy()
    try:
        body = inflater.decompress(frame[hdr.size : len(frame) - CRC.size] + _SYNC_TAIL, MAX_BODY)
    except zlib.error as exc:
        raise FrameError(f"deflated body does not inflate: {exc}", hdr.size) from None
    if inflater.unconsumed_tail:
        raise FrameError(f"deflated body inflates to more than {MAX_BODY} bytes", hdr.size)
    if inflater.eof or inflater.unused_data:
        raise FrameError("deflated body ends its deflate stream: the next frames would have no context", hdr.size)
    return Reader(body, where="inflated body"), inflater


__all__ = ["LOST", "NodeFrameDecoder", "NodeFrameEncoder", "NodeHeader", "Segments", "is_node_frame",
           "peek_node_header"]
