"""Read an agent's spool back and decode its node frames (benchmarks/gpu/node_frames_spool.py, and CI
on the spool it kept from a real H100)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def spooled(spool: Path) -> list[Any]:
    """Every message in the spool's segments, in order."""
    from agent.spool_format import ENTRY_HEADER, _decode_payload

    out = []
    for seg in sorted(spool.rglob("*.seg")):  # the agent's segments, or one kept beside its run
        data = seg.read_bytes()
        pos = 0
        while pos + ENTRY_HEADER.size <= len(data):
            length, _crc = ENTRY_HEADER.unpack_from(data, pos)
            if length == 0:
                break
            out.append(_decode_payload(data[pos + ENTRY_HEADER.size : pos + ENTRY_HEADER.size + length]))
            pos += ENTRY_HEADER.size + length
    return out


def check(spool: Path) -> dict[str, Any]:
    from telemetry.codec.node import NodeFrameDecoder, is_node_frame, peek_node_header

    messages = spooled(spool)
    decoder = NodeFrameDecoder()
    frames = records = values = frame_bytes = keyframes = 0
    per_gpu: dict[str, list[float]] = {}
    sm: list[float] = []
    kinds: dict[str, int] = {}
    for m in messages:
        kind = dict(m.headers).get("type", b"?").decode()
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind != "frame":
            continue
        assert is_node_frame(m.value), "the agent's default is node frames"
        header = peek_node_header(m.value)
        keyframes += header.keyframe
        for group in decoder.decode_checked(m.value, header):
            for r in group:
                per_gpu.setdefault(r.gpu, []).append(r.ts)
                values += len(r.metrics)
                if "DCGM_FI_PROF_SM_ACTIVE" in r.metrics:
                    sm.append(float(r.metrics["DCGM_FI_PROF_SM_ACTIVE"]))
            records += len(group)
        frames += 1
        frame_bytes += len(m.value)
    ordered = all(ts == sorted(ts) for ts in per_gpu.values())
    span = max((ts[-1] - ts[0] for ts in per_gpu.values()), default=0.0)
    return {"messages": kinds, "frames": frames, "keyframes": keyframes, "gpus": len(per_gpu), "records": records,
            "values": values, "frame_bytes": frame_bytes, "frame_bytes_per_value": frame_bytes / max(1, values),
            "records_per_frame": records / max(1, frames), "each_gpu_in_time_order": ordered,
            "seconds_covered": span, "sm_active_max": max(sm, default=None),
            "sm_active_samples_over_0_5": sum(1 for v in sm if v > 0.5)}
