"""The spool's on-disk entry format: encoding, decoding and the CRC checks that find damage.

Kept apart from :mod:`agent.spool` so the byte layout (and the scan that steps over damage)
can be read, tested and benchmarked without the file and cursor bookkeeping around it.
Each entry is ``u32 length | u32 crc32(payload) | payload``; a payload is
``u8 version | u16 key length | u16 header count | key | headers | value``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from telemetry.wire import Message

ENTRY_HEADER = struct.Struct("<II")  # payload length, crc32(payload)
PAYLOAD_HEAD = struct.Struct("<BHH")  # format version, key length, header count
HEADER_HEAD = struct.Struct("<HI")  # header name length, header value length
FORMAT_VERSION = 1
MAX_ENTRY_BYTES = 64 << 20  # a frame is a few KB; anything larger is damage, not data
READ_CHUNK = 1 << 20  # replay reads segments in chunks of this size
SEGMENT_SUFFIX = ".seg"


class _CorruptEntryError(ValueError):
    pass


def encode_entry(msg: Message) -> bytes:
    """The on-disk bytes of one entry (header and payload)."""
    parts: list[bytes] = [PAYLOAD_HEAD.pack(FORMAT_VERSION, len(msg.key), len(msg.headers)), msg.key]
    for name, value in msg.headers:
        raw = name.encode()
        parts += [HEADER_HEAD.pack(len(raw), len(value)), raw, value]
    parts.append(msg.value)
    payload = b"".join(parts)
    if len(payload) > MAX_ENTRY_BYTES:
        raise ValueError(f"message of {len(payload)} bytes exceeds the spool's entry limit ({MAX_ENTRY_BYTES})")
    return ENTRY_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes | memoryview) -> Message:
    mv = memoryview(payload)
    if len(mv) < PAYLOAD_HEAD.size:
        raise _CorruptEntryError("payload shorter than its head")
    version, key_len, n_headers = PAYLOAD_HEAD.unpack_from(mv, 0)
    if version != FORMAT_VERSION:
        raise _CorruptEntryError(f"unknown entry format {version}")
    pos = PAYLOAD_HEAD.size + key_len
    if pos > len(mv):
        raise _CorruptEntryError("key past the payload's end")
    key = bytes(mv[PAYLOAD_HEAD.size:pos])
    if not n_headers:  # the common case, kept short: replay reads hundreds of thousands per second
        return Message(key, bytes(mv[pos:]))
    headers: list[tuple[str, bytes]] = []
    for _ in range(n_headers):
        if pos + HEADER_HEAD.size > len(mv):
            raise _CorruptEntryError("header past the payload's end")
        name_len, value_len = HEADER_HEAD.unpack_from(mv, pos)
        pos += HEADER_HEAD.size
        name_end = pos + name_len
        value_end = name_end + value_len
        if value_end > len(mv):
            raise _CorruptEntryError("header past the payload's end")
        try:
            name = bytes(mv[pos:name_end]).decode()
        except UnicodeDecodeError as exc:
            raise _CorruptEntryError("header name is not UTF-8") from exc
        headers.append((name, bytes(mv[name_end:value_end])))
        pos = value_end
    if pos > len(mv):
        raise _CorruptEntryError("key past the payload's end")
    return Message(key, bytes(mv[pos:]), tuple(headers))


def _entry_at(data: bytes, pos: int) -> int:
    """Length of a valid entry starting at ``pos`` in ``data``, or 0 if there is none."""
    if pos + ENTRY_HEADER.size > len(data):
        return 0
    length, crc = ENTRY_HEADER.unpack_from(data, pos)
    start = pos + ENTRY_HEADER.size
    end = start + length
    if length < PAYLOAD_HEAD.size or length > MAX_ENTRY_BYTES or end > len(data):
        return 0
    payload = memoryview(data)[start:end]
    if data[start] != FORMAT_VERSION or zlib.crc32(payload) != crc:
        return 0
    try:
        _decode_payload(payload)
    except _CorruptEntryError:
        return 0
    return int(end - pos)


@dataclass(slots=True)
class _Scan:
    entries: list[tuple[int, int]]  # (offset, entry length) of each valid entry
    regions: int  # damaged regions found (a torn tail is one)
    size: int  # bytes scanned

    @property
    def valid_end(self) -> int:
        """End of the last valid entry (0 if there is none)."""
        return self.entries[-1][0] + self.entries[-1][1] if self.entries else 0

    @property
    def damaged_bytes(self) -> int:
        return self.size - sum(length for _, length in self.entries)


def _scan(data: bytes) -> _Scan:
    """Find the valid entries of a segment's bytes, resynchronising past damage.

    After a damaged spot the next valid entry is searched byte by byte (candidates are
    positions whose payload starts with the format version byte); a CRC32 match on a
    plausible length is taken as the next entry. A torn tail has nothing valid after it.
    """
    entries: list[tuple[int, int]] = []
    regions = 0
    pos = 0
    size = len(data)
    while pos < size:
        length = _entry_at(data, pos)
        if length:
            entries.append((pos, length))
            pos += length
            continue
        regions += 1
        found = -1
        probe = pos + 1 + ENTRY_HEADER.size
        while True:
            probe = data.find(FORMAT_VERSION, probe)
            if probe < 0:
                break
            if _entry_at(data, probe - ENTRY_HEADER.size):
                found = probe - ENTRY_HEADER.size
                break
            probe += 1
        if found < 0:
            break
        pos = found
    return _Scan(entries, regions, size)



def _jumps(entries: list[tuple[int, int]], base_idx: int, base_off: int, expect: int) -> dict[int, int]:
    """Jump-table rows for ``entries`` (offsets relative to ``base_off``), numbered from ``base_idx``."""
    out: dict[int, int] = {}
    for j, (off, length) in enumerate(entries):
        at = base_off + off
        if at != expect:
            out[base_idx + j] = at
        expect = at + length
    return out
