"""Fuzzing the decoder: whatever the bytes, it returns records or raises FrameError, never anything else.

Random bytes rarely get past the checksum, so mutated frames get their CRC recomputed:
that sends the corruption into every section's parser. Truncated, extended and
byte-flipped frames of each mode (lossless, quantised, zstd) are decoded both by a fresh
decoder and by one that holds the stream's state.
"""

from __future__ import annotations

import struct
import zlib
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.codec import FrameDecoder, FrameEncoder, FrameError, peek_header
from telemetry.records import GpuRecord, ProcessRecord
from tests.support.standin import standin_trace

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def streams() -> tuple[tuple[bytes, ...], ...]:
    """Frame streams of a realistic trace and of an awkward one, in several modes."""
    realistic = list(standin_trace(1, 48, seed=11))
    awkward = [
        GpuRecord(
            ts=float(i) if i % 3 else -0.0,
            node="n",
            gpu="not-a-uuid",
            metrics={"big": 2**70 * i, "nan": float("nan"), "mix": i if i % 2 else 0.5, "custom.k": i / 7},
            processes=[ProcessRecord(i % 2, None, None, 1.5, i)] * (i % 3),
            mig_profile="1g" if i % 4 else None,
        )
        for i in range(24)
    ]
    out = []
    for records in (realistic, awkward):
        for quantize, level in ((False, None), (True, None), (True, 3)):
            encoder = FrameEncoder(quantize=quantize, keyframe_every=3, zstd_level=level)
            out.append(tuple(encoder.encode(records[i : i + 6]) for i in range(0, len(records), 6)))
    return tuple(out)


def with_crc(frame: bytes) -> bytes:
    return frame[:-4] + struct.pack("<I", zlib.crc32(frame[:-4]))


def mutate(data: st.DataObject, original: bytes) -> bytes:
    """One to four edits: a bit flipped, a byte set, bytes inserted or deleted, the tail cut."""
    frame = bytearray(original)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        if not frame:
            break
        action = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(frame) - 5)))
        if action == "flip":
            frame[at] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        elif action == "set":
            frame[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif action == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del frame[at : at + data.draw(st.integers(min_value=1, max_value=8))]
        else:
            del frame[at:]
    return bytes(frame)


def decode_or_frame_error(decoder: FrameDecoder, frame: bytes) -> None:
    try:
        records = decoder.decode(frame)
    except FrameError as exc:
        assert str(exc)
        return
    assert all(isinstance(r, GpuRecord) for r in records)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_frame_error(data: bytes) -> None:
    decode_or_frame_error(FrameDecoder(), data)
    decode_or_frame_error(FrameDecoder(), b"GW\x01" + data)


@FUZZ
@given(st.data())
def test_mutated_frames_raise_only_frame_error(data: st.DataObject) -> None:
    stream = data.draw(st.sampled_from(streams()))
    index = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
    mutated = mutate(data, stream[index])
    fixed = with_crc(mutated) if len(mutated) >= 4 else mutated
    decode_or_frame_error(FrameDecoder(), mutated)
    decode_or_frame_error(FrameDecoder(), fixed)
    primed = FrameDecoder()
    for earlier in stream[:index]:
        primed.decode(earlier)
    decode_or_frame_error(primed, fixed)


@FUZZ
@given(st.data())
def test_truncated_frames_name_the_problem(data: st.DataObject) -> None:
    stream = data.draw(st.sampled_from(streams()))
    frame = stream[0]
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 5))  # the CRC is the last 4 bytes
    for candidate in (frame[:cut], with_crc(frame[:cut] + b"\x00\x00\x00\x00")):
        try:
            FrameDecoder().decode(candidate)
        except FrameError as exc:
            assert exc.reason
        else:
            raise AssertionError("a truncated frame decoded")


def test_error_messages_say_what_and_where() -> None:
    frame = streams()[0][0]
    header = peek_header(frame)
    cut = with_crc(frame[: header.size + 3] + b"\x00\x00\x00\x00")
    try:
        FrameDecoder().decode(cut)
    except FrameError as exc:
        assert exc.offset is not None and exc.offset >= header.size
        assert "truncated" in exc.reason or "exceeds" in exc.reason
        assert f"at frame byte {exc.offset}" in str(exc)
    else:
        raise AssertionError("a truncated frame decoded")
