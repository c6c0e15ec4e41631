"""Codec cases found in real use, each kept as a test."""

from __future__ import annotations

from telemetry.codec import FrameDecoder, FrameEncoder, peek_header
from telemetry.records import GpuRecord


def _rec(ts: float, metrics: dict[str, float]) -> GpuRecord:
    return GpuRecord(ts=ts, node="n", gpu="GPU-00000000-0003-4000-8000-000000000003", metrics=metrics)


def test_delta_frame_of_many_repeating_columns_decodes() -> None:
    """An idle GPU: after the first GPM pair nine ratios stay 0.0, so a one-record delta
    frame is mostly repeats and shorter in bytes than its column count (found by `gpuwatch up`)."""
    base = {f"DCGM_FI_DEV_{k}": float(i) for i, k in enumerate(["GPU_UTIL", "FB_USED", "GPU_TEMP"])}
    prof = {k: 0.0 for k in [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"]}
    records = [_rec(100.0, base)] + [_rec(100.25 + 0.4 * i, {**base, **prof}) for i in range(5)]
    encoder, decoder = FrameEncoder(keyframe_every=60), FrameDecoder()
    for record in records:
        frame = encoder.encode([record])
        (out,) = decoder.decode(frame)
        assert out.metrics == record.metrics
    assert not peek_header(frame).keyframe
