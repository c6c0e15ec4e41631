"""The .gwf frame file: frames come back in order, damage is reported once with its offset, reading goes on."""

from __future__ import annotations

import io

import pytest

from telemetry.codec import FrameEncoder
from telemetry.framefile import (
    ENTRY_MARKER,
    FILE_MAGIC,
    Damage,
    FrameEntry,
    FrameFileError,
    FrameFileWriter,
    read_frames,
)
from tests.support.standin import standin_trace


def frames(count: int = 6) -> list[bytes]:
    records = list(standin_trace(1, 10 * count, seed=5))
    encoder = FrameEncoder(keyframe_every=2)
    return [encoder.encode(records[i : i + 10]) for i in range(0, len(records), 10)]


def gwf(items: list[bytes]) -> bytes:
    out = io.BytesIO()
    writer = FrameFileWriter(out)
    for frame in items:
        writer.write(frame)
    assert writer.frames == len(items)
    assert writer.bytes == len(out.getvalue())
    return out.getvalue()


def test_frames_come_back_in_order_with_their_offsets() -> None:
    items = frames()
    data = gwf(items)
    read = list(read_frames(io.BytesIO(data)))
    assert [e.frame for e in read if isinstance(e, FrameEntry)] == items
    offsets = [e.offset for e in read if isinstance(e, FrameEntry)]
    assert offsets[0] == 12
    assert all(data[o : o + 4] == ENTRY_MARKER for o in offsets)


def test_an_empty_file_holds_no_frames() -> None:
    assert list(read_frames(io.BytesIO(gwf([])))) == []


def test_a_corrupt_frame_is_reported_once_and_reading_resyncs() -> None:
    items = frames()
    data = bytearray(gwf(items))
    offsets = [e.offset for e in read_frames(io.BytesIO(bytes(data))) if isinstance(e, FrameEntry)]
    data[offsets[2] + 40] ^= 0xFF  # inside the third frame
    read = list(read_frames(io.BytesIO(bytes(data))))
    damage = [e for e in read if isinstance(e, Damage)]
    assert len(damage) == 1
    assert damage[0].offset == offsets[2]
    assert damage[0].length == offsets[3] - offsets[2]
    assert "checksum" in damage[0].reason
    assert f"byte {offsets[2]}" in str(damage[0])
    assert [e.frame for e in read if isinstance(e, FrameEntry)] == items[:2] + items[3:]


def test_a_corrupt_length_does_not_lose_the_frames_after_it() -> None:
    items = frames()
    data = bytearray(gwf(items))
    offsets = [e.offset for e in read_frames(io.BytesIO(bytes(data))) if isinstance(e, FrameEntry)]
    data[offsets[1] + 4 : offsets[1] + 8] = b"\xff\xff\xff\x7f"
    read = list(read_frames(io.BytesIO(bytes(data))))
    assert [str(e) for e in read if isinstance(e, Damage)] == [
        f"byte {offsets[1]}: frame length 2147483647 runs past the end of the file; "
        f"skipped {offsets[2] - offsets[1]} bytes"
    ]
    assert [e.frame for e in read if isinstance(e, FrameEntry)] == items[:1] + items[2:]


def test_garbage_between_entries_and_a_truncated_tail_are_reported() -> None:
    items = frames(3)
    data = gwf(items)
    first_end = 12 + 8 + len(items[0])
    mangled = data[:first_end] + b"garbage!" + data[first_end:-10]
    read = list(read_frames(io.BytesIO(mangled)))
    damage = [e for e in read if isinstance(e, Damage)]
    assert (damage[0].offset, damage[0].reason) == (first_end, "no entry marker")
    assert damage[0].length == 8
    assert damage[-1].reason.startswith("frame length")  # the last frame lost its end
    assert [e.frame for e in read if isinstance(e, FrameEntry)] == items[:2]


def test_a_file_that_is_not_a_frame_file_is_refused() -> None:
    with pytest.raises(FrameFileError, match="bad magic"):
        list(read_frames(io.BytesIO(b'{"ts": 1}\n')))
    with pytest.raises(FrameFileError, match=r"unsupported \.gwf version 9"):
        list(read_frames(io.BytesIO(FILE_MAGIC + b"\x09\x00\x00\x00")))
