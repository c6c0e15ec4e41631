"""Node frames: every GPU's records of a flush in one frame (telemetry.codec.node).

The same promises as a GPU frame's (tests/test_codec_roundtrip.py, tests/test_codec_fuzz.py):
lossless streams come back bit for bit, quantised ones within half a quantum; a decoder
that joins mid-stream waits for a keyframe; a refused frame leaves the decoder's state as
it was; and whatever the bytes, the decoder returns records or raises FrameError.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.codec import FrameError
from telemetry.codec.node import NodeFrameDecoder, NodeFrameEncoder, peek_node_header
from telemetry.records import GpuRecord
from tests.support.standin import standin_trace
from tests.test_codec_roundtrip import assert_within_quantum, exact_record, streams

COMMON = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = ["GPU-97b75092-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "GPU-00000000-0000-4000-8000-000000000001", "MIG-x", "gpu-3"]


@st.composite
def node_flushes(draw: st.DrawFn) -> list[list[list[GpuRecord]]]:
    """Flushes of a node: each a list of per-GPU windows; GPUs join late and fall silent."""
    per_gpu = []
    for gpu in GPUS[: draw(st.integers(min_value=1, max_value=4))]:
        windows = draw(streams(max_windows=4, max_records=4))
        start = draw(st.integers(min_value=0, max_value=2))
        per_gpu.append([None] * start + [[replace(r, gpu=gpu) for r in w] for w in windows])
    flushes = []
    for i in range(max(map(len, per_gpu))):
        flush = [w[i] for w in per_gpu if i < len(w) and w[i] is not None]
        if flush:
            flushes.append(flush)
    return flushes


def _decoded(flushes: list[list[list[GpuRecord]]], encoder: NodeFrameEncoder) -> list[tuple[list[GpuRecord],
                                                                                           list[GpuRecord]]]:
    decoder = NodeFrameDecoder()
    out = []
    for flush in flushes:
        frame = encoder.encode(flush)
        got = decoder.decode(frame)
        by_gpu = {w[0].gpu: w for w in flush}
        assert [g[0].gpu for g in got] == [gpu for gpu in decoder.gpus if gpu in by_gpu]
        for group in got:
            out.append((by_gpu[group[0].gpu], group))
    return out


@COMMON
@given(node_flushes(), st.integers(min_value=1, max_value=3), st.sampled_from([None, 1, "deflate"]))
def test_lossless_node_streams_come_back_bit_for_bit(flushes: list[list[list[GpuRecord]]], keyframe_every: int,
                                                    packing: int | str | None) -> None:
    encoder = NodeFrameEncoder(quantize=False, keyframe_every=keyframe_every, deflate=packing == "deflate",
                               zstd_level=packing if isinstance(packing, int) else None)
    for sent, got in _decoded(flushes, encoder):
        assert [exact_record(r) for r in got] == [exact_record(r) for r in sent]


@COMMON
@given(node_flushes(), st.integers(min_value=1, max_value=3), st.booleans())
def test_quantised_node_streams_come_back_within_half_a_quantum(flushes: list[list[list[GpuRecord]]],
                                                               keyframe_every: int, deflate: bool) -> None:
    for sent, got in _decoded(flushes, NodeFrameEncoder(quantize=True, keyframe_every=keyframe_every,
                                                        deflate=deflate)):
        assert len(sent) == len(got)
        for a, b in zip(sent, got, strict=True):
            assert_within_quantum(a, b)


def _trace_flushes(gpus: int = 4, seconds: int = 40, per: int = 2) -> list[list[list[GpuRecord]]]:
    records = list(standin_trace(gpus, seconds, seed=5))
    by_gpu: dict[str, list[GpuRecord]] = {}
    for r in records:
        by_gpu.setdefault(r.gpu, []).append(r)
    return [[w[i : i + per] for w in by_gpu.values()] for i in range(0, seconds, per)]


def test_a_decoder_that_joins_mid_stream_waits_for_the_next_keyframe() -> None:
    flushes = _trace_flushes()
    encoder = NodeFrameEncoder(keyframe_every=5)
    frames = [encoder.encode(f) for f in flushes]
    late = NodeFrameDecoder()
    with pytest.raises(FrameError, match="before any keyframe"):
        late.decode(frames[2])
    assert [peek_node_header(f).keyframe for f in frames[:6]] == [True, False, False, False, False, True]
    got = [late.decode(f) for f in frames[5:]]
    assert sum(len(r) for g in got for r in g) == sum(len(w) for f in flushes[5:] for w in f)


def test_a_refused_frame_leaves_the_decoder_as_it_was() -> None:
    flushes = _trace_flushes()
    encoder = NodeFrameEncoder(keyframe_every=60)
    frames = [encoder.encode(f) for f in flushes]
    decoder = NodeFrameDecoder()
    decoder.decode(frames[0])
    with pytest.raises(FrameError, match="sequence gap: expected frame 1, got 2"):
        decoder.decode(frames[2])
    cut = frames[1][:-5] + frames[1][-4:]  # the body's last byte gone, the checksum made right again
    with pytest.raises(FrameError, match="truncated"):
        decoder.decode(_with_crc(cut))
    assert decoder.decode(frames[1]) and decoder.decode(frames[2])  # the stream goes on


def test_a_deflated_stream_is_smaller_and_decodes_to_the_same_records() -> None:
    flushes = _trace_flushes(gpus=4, seconds=60, per=1)
    plain_encoder, deflating = NodeFrameEncoder(keyframe_every=20), NodeFrameEncoder(keyframe_every=20, deflate=True)
    plain = [plain_encoder.encode(f) for f in flushes]
    deflated = [deflating.encode(f) for f in flushes]
    assert [peek_node_header(f).deflated for f in deflated] == [True] * len(flushes)
    assert not any(peek_node_header(f).deflated for f in plain)
    assert [peek_node_header(f).keyframe for f in deflated] == [peek_node_header(f).keyframe for f in plain]
    assert sum(map(len, deflated[1:20])) < 0.9 * sum(map(len, plain[1:20]))  # delta frames, against their past
    a, b = NodeFrameDecoder(), NodeFrameDecoder()
    assert [a.decode(f) for f in plain] == [b.decode(f) for f in deflated]
    late = NodeFrameDecoder()  # a context starts at each keyframe: a decoder can join there
    with pytest.raises(FrameError, match="before any keyframe"):
        late.decode(deflated[5])
    assert late.decode(deflated[20]) == NodeFrameDecoder().decode(plain[20])


def test_a_refused_deflated_frame_leaves_the_stream_context_as_it_was() -> None:
    flushes = _trace_flushes()
    encoder = NodeFrameEncoder(keyframe_every=60, deflate=True)
    frames = [encoder.encode(f) for f in flushes]
    decoder = NodeFrameDecoder()
    decoder.decode(frames[0])
    cut = frames[1][: 12 + (len(frames[1]) - 16) // 2]  # half the body lost, the checksum made right again
    with pytest.raises(FrameError, match="inflated body"):
        decoder.decode(_with_crc(cut + b"\0\0\0\0"))
    with pytest.raises(FrameError):
        decoder.decode(_with_crc(frames[1][:14] + b"\xff" * 40 + b"\0\0\0\0"))
    for f in frames[1:]:  # the inflater was a copy: the stream goes on from where it was
        assert decoder.decode(f)


def test_a_deflated_delta_frame_needs_a_deflated_keyframe_and_one_compression() -> None:
    flushes = _trace_flushes()
    plain = NodeFrameEncoder(keyframe_every=60)
    deflating = NodeFrameEncoder(keyframe_every=60, deflate=True)
    decoder = NodeFrameDecoder()
    decoder.decode(plain.encode(flushes[0]))
    deflating.encode(flushes[0])
    with pytest.raises(FrameError, match="were not deflated"):
        decoder.decode(deflating.encode(flushes[1]))
    both = bytearray(plain.encode(flushes[1])[:-4])
    both[3] |= 0x02 | 0x08
    with pytest.raises(FrameError, match="both zstd and deflate"):
        decoder.decode(_with_crc(bytes(both) + b"\0\0\0\0"))
    with pytest.raises(ValueError, match="not both"):
        NodeFrameEncoder(deflate=True, zstd_level=3)


def test_a_new_gpu_makes_a_keyframe_and_a_silent_one_leaves_the_table_at_a_periodic_keyframe() -> None:
    flushes = _trace_flushes(gpus=3, seconds=60, per=1)
    encoder = NodeFrameEncoder(keyframe_every=4)
    decoder = NodeFrameDecoder()
    first = [w for w in flushes[0] if w[0].gpu != flushes[0][2][0].gpu]
    keyframes = []
    for i, flush in enumerate([first, *flushes[1:20]]):
        if i >= 6:
            flush = flush[:1]  # two GPUs fall silent
        frame = encoder.encode(flush)
        keyframes.append(peek_node_header(frame).keyframe)
        decoder.decode(frame)
    assert keyframes[:3] == [True, True, False]  # the third GPU appears in the second flush
    assert len(decoder.gpus) == 1  # dropped at a periodic keyframe, a keyframe interval after their last record


def test_what_a_node_frame_refuses_to_carry() -> None:
    encoder = NodeFrameEncoder()
    r = GpuRecord(ts=1.0, node="n", gpu="GPU-a", metrics={"DCGM_FI_DEV_GPU_UTIL": 1})
    with pytest.raises(ValueError, match="at least one record"):
        encoder.encode([])
    with pytest.raises(ValueError, match="one run of records per GPU"):
        encoder.encode([[r], [r]])
    with pytest.raises(ValueError, match="mixed"):
        encoder.encode([[r, replace(r, gpu="GPU-b")]])


# ---- fuzzing ----
def _with_crc(frame: bytes) -> bytes:
    return frame[:-4] + struct.pack("<I", zlib.crc32(frame[:-4]))


_FRAMES: list[bytes] = []


def _frames() -> list[bytes]:
    if not _FRAMES:
        for quantize, level, deflate in ((True, None, False), (False, None, False), (True, 3, False),
                                         (True, None, True)):
            encoder = NodeFrameEncoder(quantize=quantize, keyframe_every=3, zstd_level=level, deflate=deflate)
            _FRAMES.extend(encoder.encode(f) for f in _trace_flushes(gpus=3, seconds=24, per=2))
    return _FRAMES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_node_frame_decodes_or_raises_frame_error(data: st.DataObject) -> None:
    frames = _frames()
    i = data.draw(st.integers(min_value=0, max_value=len(frames) - 1))
    frame = bytearray(frames[i])
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        if not frame:
            break  # cut and deleted to nothing: nothing left to flip or set
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(frame) - 5)))
        action = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if action == "flip":
            frame[at] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        elif action == "set":
            frame[at] = data.draw(st.integers(min_value=0, max_value=255))
        elif action == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del frame[at : at + data.draw(st.integers(min_value=1, max_value=8))]
        else:
            del frame[max(5, at) :]
    mutated = _with_crc(bytes(frame)) if len(frame) > 4 else bytes(frame)
    keyed = NodeFrameDecoder()  # a decoder with the stream's state: the frames before this one
    start = i - (i % 3)  # each mode's stream has 12 frames, a keyframe every 3: from this one's keyframe
    for f in frames[start:i]:
        keyed.decode(f)
    for decoder in (NodeFrameDecoder(), keyed):
        try:
            groups = decoder.decode(mutated)
        except FrameError:
            continue
        assert all(isinstance(r, GpuRecord) for g in groups for r in g)


@pytest.mark.parametrize("cut", [33, 44])
def test_a_truncated_deflated_frame_whose_column_length_reaches_one_byte_past_its_body_is_refused(cut: int) -> None:
    """Found by the mutation test above (CI, 2026-12-06): a deflated delta frame cut short and given a
    valid checksum inflated to a body whose column length, read as a varint, counted its own byte as
    room, so the block ended one byte past the body: ``struct.error`` / ``ValueError`` from the byte
    planes, not FrameError. The length is now checked against the bytes after it (``Reader.length``)."""
    frames = _frames()
    i = 44
    mutated = _with_crc(frames[i][:cut])
    keyed = NodeFrameDecoder()
    for f in frames[i - (i % 3) : i]:
        keyed.decode(f)
    with pytest.raises(FrameError, match="column length"):
        keyed.decode(mutated)


def test_the_shipped_agents_node_frames_from_a_real_h100_decode() -> None:
    """``gpuwatch agent`` on an H100 (2026-12-06), Kafka unreachable: its spool holds the node frames it
    would have sent (benchmarks/gpu/node_frames_spool.py; docs/gpu-validation.md)."""
    from pathlib import Path

    from tests.support.spool_frames import check

    run = Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / "2026-12-06-node-frames-spool"
    got = check(run)
    assert got["frames"] == 50 and got["records"] == 97 and got["keyframes"] == 2 and got["gpus"] == 1
    assert got["each_gpu_in_time_order"] and got["sm_active_samples_over_0_5"] == 58
