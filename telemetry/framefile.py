"""The ``.gwf`` frame file: frames recorded anywhere (a real GPU node, say) and replayed anywhere.

A trace stored as frames is an order of magnitude smaller than JSON Lines and exercises
the same decoder the collector runs. The file is a short header and a sequence of
entries, each a 4-byte marker, the frame's length and the frame. Frames carry their own
CRC, so the reader can tell a damaged entry from a good one; after damage it searches for
the next marker whose frame checks out and carries on, reporting the damaged stretch once
(offset, length, reason) instead of stopping.

Layout (little-endian)::

    file header  magic 89 47 57 46 0D 0A 1A 0A ("\\x89GWF\\r\\n\\x1a\\n"), version u16 = 1, flags u16 = 0
    entry        marker A7 47 57 66 ("\\xa7GWf"), frame length u32, frame (see docs/codec.md)

The magic's high byte and CR LF / ^Z catch files mangled by text-mode transfers, as PNG's do.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from telemetry.codec.header import checksum_ok

FILE_MAGIC = b"\x89GWF\r\n\x1a\n"
FILE_VERSION = 1
_FILE_HEADER = struct.Struct("<8sHH")
ENTRY_MARKER = b"\xa7GWf"
_ENTRY = struct.Struct("<4sI")


class FrameFileError(ValueError):
    """The file is not a frame file this reader understands (bad magic or unknown version)."""


@dataclass(frozen=True, slots=True)
class FrameEntry:
    """A frame whose checksum is right, and where its entry starts in the file."""

    offset: int
    frame: bytes


@dataclass(frozen=True, slots=True)
class Damage:
    """A stretch of the file that holds no valid frame: skipped, reported once."""

    offset: int
    length: int
    reason: str

    def __str__(self) -> str:
        return f"byte {self.offset}: {self.reason}; skipped {self.length} bytes"


class FrameFileWriter:
    """Writes the file header at once, then one entry per :meth:`write`."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        fh.write(_FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, 0))
        self.frames = 0
        self.bytes = _FILE_HEADER.size

    def write(self, frame: bytes) -> None:
        self._fh.write(_ENTRY.pack(ENTRY_MARKER, len(frame)))
        self._fh.write(frame)
        self.frames += 1
        self.bytes += _ENTRY.size + len(frame)


def read_frames(fh: BinaryIO) -> Iterator[FrameEntry | Damage]:
    """Every good frame in file order, with :class:`Damage` items for what lies between.

    Raises FrameFileError at once when the file header is not that of a version-1 frame file.
    """
    data = fh.read()
    if len(data) < _FILE_HEADER.size or data[: len(FILE_MAGIC)] != FILE_MAGIC:
        raise FrameFileError("not a .gwf frame file (bad magic)")
    _, version, _ = _FILE_HEADER.unpack_from(data)
    if version != FILE_VERSION:
        raise FrameFileError(f"unsupported .gwf version {version} (this reader reads {FILE_VERSION})")
    size = len(data)
    pos = _FILE_HEADER.size
    damage_at: int | None = None
    damage_reason = ""
    while pos < size:
        problem, frame = _entry_at(data, pos)
        if problem is None:
            if damage_at is not None:
                yield Damage(damage_at, pos - damage_at, damage_reason)
                damage_at = None
            yield FrameEntry(pos, frame)
            pos += _ENTRY.size + len(frame)
            continue
        if damage_at is None:
            damage_at, damage_reason = pos, problem
        found = data.find(ENTRY_MARKER, pos + 1)
        pos = size if found < 0 else found
    if damage_at is not None:
        yield Damage(damage_at, size - damage_at, damage_reason)


def _entry_at(data: bytes, pos: int) -> tuple[str | None, bytes]:
    if len(data) - pos < _ENTRY.size:
        return f"truncated entry header ({len(data) - pos} bytes)", b""
    marker, length = _ENTRY.unpack_from(data, pos)
    if marker != ENTRY_MARKER:
        return "no entry marker", b""
    start = pos + _ENTRY.size
    if length > len(data) - start:
        return f"frame length {length} runs past the end of the file", b""
    frame = data[start : start + length]
    if not checksum_ok(frame):
        return "frame checksum mismatch", b""
    return None, frame
