"""The frame header: what a collector reads to route a frame before decoding it.

Frames of many GPUs share one Kafka topic and one collector, which keeps one decoder per
GPU stream. :func:`peek_header` gives the GPU, the sequence number, the keyframe flag, the
record count and the first timestamp from the first few dozen bytes, after checking the
frame's CRC (a fast C pass), so a corrupt frame is never routed by a corrupt GPU id.

Layout (little-endian)::

    0  magic "GW"        2  version u8         3  flags u8 (1 keyframe, 2 zstd body, 4 quantised)
    4  metric-table id u32                     8  sequence number u32 (wraps)
    12 record count u16  14 first timestamp f64
    22 GPU id: kind u8; kind 1 = "GPU-" + 16 UUID bytes, kind 2 = "MIG-" + 16 UUID bytes,
       kind 0 = varint length + UTF-8
    .. body (zstd-compressed when flag 2) .. CRC-32 u32 of everything before it
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass

from telemetry.codec.errors import FrameError
from telemetry.codec.wire import Reader, uvarint

MAGIC = b"GW"
VERSION = 1
FLAG_KEYFRAME = 0x01
FLAG_ZSTD = 0x02
FLAG_QUANTISED = 0x04
_KNOWN_FLAGS = FLAG_KEYFRAME | FLAG_ZSTD | FLAG_QUANTISED
FIXED = struct.Struct("<2sBBIIHd")
FIRST_TS_BITS = struct.Struct("<q")
FIRST_TS_OFFSET = 14
CRC = struct.Struct("<I")
MAX_RECORDS = 0xFFFF
MAX_GPU_ID = 1024
_GPU_KIND_TEXT = 0
_UUID_PREFIXES = {"GPU-": 1, "MIG-": 2}
_UUID_KINDS = {v: k for k, v in _UUID_PREFIXES.items()}


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """What a frame says about itself before its body is decoded."""

    version: int
    keyframe: bool
    compressed: bool
    quantised: bool
    table_id: int
    seq: int
    count: int
    first_ts: float
    gpu: str
    size: int  # header bytes: the body starts here


def pack_gpu(gpu: str) -> bytes:
    """17 bytes for a canonical NVML UUID ("GPU-" or "MIG-" and lower-case hex), else the text."""
    kind = _UUID_PREFIXES.get(gpu[:4])
    if kind is not None and len(gpu) == 40:
        try:
            parsed = uuid.UUID(gpu[4:])
        except ValueError:
            parsed = None
        if parsed is not None and str(parsed) == gpu[4:]:
            return bytes((kind,)) + parsed.bytes
    raw = gpu.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_GPU_ID:
        raise ValueError(f"GPU id longer than {MAX_GPU_ID} bytes")
    return bytes((_GPU_KIND_TEXT,)) + uvarint(len(raw)) + raw


def pack_header(flags: int, table_id: int, seq: int, count: int, first_ts: float, gpu_bytes: bytes) -> bytes:
    return FIXED.pack(MAGIC, VERSION, flags, table_id, seq, count, first_ts) + gpu_bytes


def with_crc(frame: bytes) -> bytes:
    return frame + CRC.pack(zlib.crc32(frame))


def checksum_ok(frame: bytes) -> bool:
    """Whether the frame's trailing CRC-32 matches the rest (False for anything too short)."""
    if len(frame) < CRC.size:
        return False
    crc_at = len(frame) - CRC.size
    crc: int = CRC.unpack_from(frame, crc_at)[0]
    return zlib.crc32(memoryview(frame)[:crc_at]) == crc


def peek_header(frame: bytes) -> FrameHeader:
    """The header of a frame whose checksum is right; raises FrameError otherwise."""
    if len(frame) < FIXED.size + 2 + CRC.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than the smallest frame", 0)
    magic, version, flags, table, seq, count, first_ts = FIXED.unpack_from(frame)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}, not a gpuwatch frame", 0)
    if version != VERSION:
        raise FrameError(f"unsupported frame version {version} (this decoder reads {VERSION})", 2)
    crc_at = len(frame) - CRC.size
    if not checksum_ok(frame):
        raise FrameError("checksum mismatch: the frame is corrupt", crc_at)
    if flags & ~_KNOWN_FLAGS:
        raise FrameError(f"unknown frame flags {flags:#x}", 3)
    if count == 0:
        raise FrameError("frame holds no records", 12)
    r = Reader(frame, FIXED.size, crc_at)
    gpu = read_gpu(r)
    return FrameHeader(
        version=version,
        keyframe=bool(flags & FLAG_KEYFRAME),
        compressed=bool(flags & FLAG_ZSTD),
        quantised=bool(flags & FLAG_QUANTISED),
        table_id=table,
        seq=seq,
        count=count,
        first_ts=first_ts,
        gpu=gpu,
        size=r.pos,
    )


def read_gpu(r: Reader) -> str:
    """A GPU id as :func:`pack_gpu` wrote it."""
    at = r.pos
    kind = r.u8("GPU id kind")
    prefix = _UUID_KINDS.get(kind)
    if prefix is not None:
        return prefix + str(uuid.UUID(bytes=r.take(16, "GPU UUID")))
    if kind == _GPU_KIND_TEXT:
        return _text_gpu(r)
    raise r.fail(f"unknown GPU id kind {kind}", at)


def _text_gpu(r: Reader) -> str:
    start = r.pos
    size = r.count("GPU id length", MAX_GPU_ID)
    try:
        return r.take(size, "GPU id").decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise r.fail(f"GPU id is not UTF-8: {exc.reason}", start) from None
