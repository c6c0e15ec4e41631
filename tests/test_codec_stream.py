"""The frame stream's protocol: keyframes, sequence numbers, routing, upgrades in either order."""

from __future__ import annotations

import math
import struct
import zlib

import pytest

from telemetry.catalog import CATALOG, Metric, table_id
from telemetry.codec import (
    FrameDecoder,
    FrameEncoder,
    FrameError,
    StreamDecoder,
    WindowedEncoder,
    peek_header,
)
from telemetry.codec import columns as columns_module
from telemetry.records import GpuRecord, ProcessRecord
from tests.support.standin import standin_trace

GPU = "GPU-97b75092-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


def window(start: int, n: int = 5, gpu: str = GPU, **extra: float) -> list[GpuRecord]:
    return [
        GpuRecord(
            ts=1764489600.0 + i,
            node="node-a",
            gpu=gpu,
            metrics={"DCGM_FI_DEV_GPU_UTIL": 50 + i % 3, "DCGM_FI_DEV_POWER_USAGE": 300 + i / 1000, **extra},
            processes=[ProcessRecord(7, "python", 1000, 40 + i % 5, 3)],
        )
        for i in range(start, start + n)
    ]


def test_header_names_gpu_sequence_keyframe_count_and_first_timestamp() -> None:
    encoder = FrameEncoder()
    frames = [encoder.encode(window(5 * k)) for k in range(3)]
    headers = [peek_header(f) for f in frames]
    assert [h.seq for h in headers] == [0, 1, 2]
    assert [h.keyframe for h in headers] == [True, False, False]
    assert {h.gpu for h in headers} == {GPU}
    assert headers[1].count == 5
    assert headers[1].first_ts == 1764489605.0
    assert headers[0].table_id == table_id()
    assert headers[0].quantised and not headers[0].compressed
    # A canonical NVML UUID travels as 17 bytes: the header is 22 fixed bytes and the id.
    assert headers[0].size == 22 + 17


def test_a_gpu_id_that_is_no_uuid_travels_as_text() -> None:
    gpu = "MIG-GPU-97b75092-1c2d-4e5f-8a9b-0c1d2e3f4a5b/1/0"
    frame = FrameEncoder().encode(window(0, gpu=gpu))
    assert peek_header(frame).gpu == gpu
    assert FrameDecoder().decode(frame)[0].gpu == gpu


def test_keyframes_every_k_frames_when_a_metric_appears_and_on_request() -> None:
    encoder = FrameEncoder(keyframe_every=3)
    keys = [peek_header(encoder.encode(window(5 * k))).keyframe for k in range(7)]
    assert keys == [True, False, False, True, False, False, True]
    assert peek_header(encoder.encode(window(40, DCGM_FI_DEV_GPU_TEMP=60))).keyframe
    # A metric that disappears needs no keyframe: it is absent from the delta frame.
    assert not peek_header(encoder.encode(window(45))).keyframe
    encoder.force_keyframe()
    assert peek_header(encoder.encode(window(50))).keyframe


def test_unchanged_columns_cost_nothing_in_a_delta_frame() -> None:
    records = [GpuRecord(1.0 + i, "n", GPU, {f"m{j}": 7 for j in range(30)}) for i in range(20)]
    encoder = FrameEncoder()
    first = encoder.encode(records[:10])
    second = encoder.encode(records[10:])
    assert len(second) < len(first) / 3
    assert FrameDecoder().decode(first) == records[:10]


def test_a_delta_frame_before_any_keyframe_is_refused() -> None:
    encoder = FrameEncoder()
    encoder.encode(window(0))
    delta = encoder.encode(window(5))
    with pytest.raises(FrameError, match="before any keyframe"):
        FrameDecoder().decode(delta)


def test_a_sequence_gap_is_refused_until_the_next_keyframe() -> None:
    encoder = FrameEncoder(keyframe_every=4)
    frames = [encoder.encode(window(5 * k)) for k in range(5)]
    decoder = FrameDecoder()
    decoder.decode(frames[0])
    with pytest.raises(FrameError, match="sequence gap: expected frame 1, got 2"):
        decoder.decode(frames[2])  # frame 1 was lost
    with pytest.raises(FrameError, match="sequence gap"):
        decoder.decode(frames[3])
    assert decoder.decode(frames[4]) == window(20)  # the keyframe resyncs


def test_a_refused_frame_leaves_the_decoder_as_it_was() -> None:
    encoder = FrameEncoder()
    frames = [encoder.encode(window(5 * k)) for k in range(3)]
    decoder = FrameDecoder()
    decoder.decode(frames[0])
    decoder.decode(frames[1])
    with pytest.raises(FrameError):
        decoder.decode(frames[1])  # redelivered
    corrupt = bytearray(frames[2])
    corrupt[30] ^= 0xFF
    with pytest.raises(FrameError, match="checksum mismatch"):
        decoder.decode(bytes(corrupt))
    assert decoder.decode(frames[2]) == window(10)
    assert decoder.expected_seq == 3


def test_a_decoder_keeps_to_its_gpu() -> None:
    decoder = FrameDecoder()
    decoder.decode(FrameEncoder().encode(window(0)))
    other = FrameEncoder().encode(window(0, gpu="GPU-other"))
    with pytest.raises(FrameError, match="given to the decoder of"):
        decoder.decode(other)


def test_encoder_refuses_bad_windows_and_keeps_its_state() -> None:
    encoder = FrameEncoder()
    decoder = FrameDecoder()
    decoder.decode(encoder.encode(window(0)))
    with pytest.raises(ValueError, match="one GPU"):
        encoder.encode(window(5) + window(10, gpu="GPU-other"))
    with pytest.raises(ValueError, match="not a number"):
        encoder.encode(window(5, DCGM_FI_DEV_GPU_TEMP="hot"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 to 65535"):
        encoder.encode([])
    with pytest.raises(ValueError, match="use one encoder per GPU"):
        encoder.encode(window(5, gpu="GPU-other"))
    assert decoder.decode(encoder.encode(window(5))) == window(5)


NEW = Metric("DCGM_FI_DEV_NEW_THING", 5000, "W", "gauge", "A metric from a newer catalog.", "new", "fast", 0.001)


def test_an_old_decoder_skips_field_ids_it_does_not_know() -> None:
    encoder = FrameEncoder(metrics=(*CATALOG, NEW))
    decoder = FrameDecoder()
    for k in range(3):
        records = window(5 * k, DCGM_FI_DEV_NEW_THING=12.5)
        got = decoder.decode(encoder.encode(records))
        for sent, back in zip(records, got, strict=True):
            assert "DCGM_FI_DEV_NEW_THING" not in back.metrics
            del sent.metrics["DCGM_FI_DEV_NEW_THING"]
            assert back == sent
    assert decoder.unknown_fields == {5000}


def test_keys_outside_the_catalog_travel_by_name_and_a_newer_decoder_knows_them() -> None:
    frame = FrameEncoder().encode(window(0, DCGM_FI_DEV_NEW_THING=12.5))
    assert FrameDecoder().decode(frame) == window(0, DCGM_FI_DEV_NEW_THING=12.5)
    assert FrameDecoder(metrics=(*CATALOG, NEW)).decode(frame) == window(0, DCGM_FI_DEV_NEW_THING=12.5)


def test_an_encoding_tag_from_a_newer_version_is_skipped_until_a_keyframe(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = FrameEncoder(keyframe_every=3)
    original = columns_module._block

    def future_int(tag: int, payload: bytes) -> bytes:
        return original(9 if tag == columns_module.INT else tag, payload)

    monkeypatch.setattr(columns_module, "_block", future_int)
    newer = encoder.encode(window(0))
    monkeypatch.setattr(columns_module, "_block", original)
    decoder = FrameDecoder()
    got = decoder.decode(newer)
    assert [set(r.metrics) for r in got] == [{"DCGM_FI_DEV_POWER_USAGE"}] * 5
    # The next delta frame's INT column is relative to the skipped one: dropped, not misread.
    got = decoder.decode(encoder.encode(window(5)))
    assert [set(r.metrics) for r in got] == [{"DCGM_FI_DEV_POWER_USAGE"}] * 5
    decoder.decode(encoder.encode(window(10)))
    assert decoder.decode(encoder.encode(window(15))) == window(15)  # the keyframe brings it back


def test_nan_infinities_and_negative_zero_survive_lossless_and_quantised() -> None:
    weird = [math.nan, -math.inf, -0.0, struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]]
    records = [GpuRecord(float(i), "n", GPU, {"DCGM_FI_DEV_POWER_USAGE": v}) for i, v in enumerate(weird)]
    for quantize in (False, True):
        got = FrameDecoder().decode(FrameEncoder(quantize=quantize).encode(records))
        sent_bits = [struct.pack("<d", r.metrics["DCGM_FI_DEV_POWER_USAGE"]) for r in records]
        assert [struct.pack("<d", r.metrics["DCGM_FI_DEV_POWER_USAGE"]) for r in got] == sent_bits


def test_timestamps_of_any_shape_come_back_exactly() -> None:
    for ts in ([1764489600.123456789, 1764489601.2, 1764489602.2], [math.nan, 1.0, -0.0], [1e300, -1e300, 5e-324]):
        records = [GpuRecord(t, "n", GPU, {}) for t in ts]
        got = FrameDecoder().decode(FrameEncoder().encode(records))
        assert [struct.pack("<d", r.ts) for r in got] == [struct.pack("<d", t) for t in ts]


def test_many_gpus_are_windowed_and_routed_by_header() -> None:
    records = list(standin_trace(3, 95, seed=3))
    windows = WindowedEncoder(20, lambda: FrameEncoder(quantize=False, zstd_level=3))
    frames = [f for r in records for f in windows.add(r)] + windows.flush()
    streams = StreamDecoder()
    decoded = [r for f in frames for r in streams.decode(f)]
    assert len(streams.decoders) == 3
    for gpu in {r.gpu for r in records}:
        assert [r for r in decoded if r.gpu == gpu] == [r for r in records if r.gpu == gpu]


def test_stream_decoder_refuses_a_delta_frame_of_an_unknown_gpu() -> None:
    encoder = FrameEncoder()
    encoder.encode(window(0))
    streams = StreamDecoder()
    with pytest.raises(FrameError, match="before any keyframe"):
        streams.decode(encoder.encode(window(5)))
    assert streams.decoders == {}


def test_stats_account_for_every_byte_before_zstd() -> None:
    encoder = FrameEncoder(collect_stats=True)
    frames = [encoder.encode(window(5 * k)) for k in range(4)]
    stats = encoder.stats
    assert stats is not None
    assert stats["records"] == 20 and stats["values"] == 40
    parts = sum(v for k, v in stats.items() if k not in ("records", "values", "zstd saving"))
    assert parts == sum(map(len, frames))


def test_corrupt_header_fields_are_named() -> None:
    frame = FrameEncoder().encode(window(0))

    def patched(offset: int, data: bytes) -> bytes:
        body = frame[:offset] + data + frame[offset + len(data) : -4]
        return body + struct.pack("<I", zlib.crc32(body))

    with pytest.raises(FrameError, match="bad magic"):
        peek_header(b"XX" + frame[2:])
    with pytest.raises(FrameError, match="unsupported frame version 7"):
        peek_header(patched(2, b"\x07"))
    with pytest.raises(FrameError, match="unknown frame flags"):
        peek_header(patched(3, b"\x80"))
    with pytest.raises(FrameError, match="no records"):
        peek_header(patched(12, b"\x00\x00"))
    with pytest.raises(FrameError, match="shorter than the smallest frame"):
        peek_header(frame[:10])
