"""The agent's framer: node and instance headers on every message, keyframes on request, node frames."""

from __future__ import annotations

from agent.framing import Framer
from telemetry.codec import peek_header
from telemetry.codec.node import NodeFrameDecoder, peek_node_header
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import Message


def _record(gpu: str, ts: float) -> GpuRecord:
    return GpuRecord(ts=ts, node="node-a", gpu=gpu, metrics={"DCGM_FI_DEV_GPU_UTIL": 50.0})


def _framer(out: list[Message], layout: str = "gpu") -> Framer:
    return Framer(out.append, node="node-a", instance="0123456789abcdef", window=1, keyframe_every=60, layout=layout)


def test_every_frame_and_event_carries_node_and_instance_headers() -> None:
    out: list[Message] = []
    framer = _framer(out, "node")
    framer.add(_record("GPU-1", 1.0))
    framer.add_event(EventRecord(2.0, "node-a", "GPU-1", "xid", 79, "fell off the bus"))
    assert [dict(m.headers) for m in out] == [
        {"type": b"frame", "node": b"node-a", "instance": b"0123456789abcdef"},
        {"type": b"event", "node": b"node-a", "instance": b"0123456789abcdef"},
    ]
    assert framer.stats().events_total == 1 and framer.stats().frames_total == 1


def test_a_keyframe_request_makes_the_next_frame_of_that_gpu_a_keyframe() -> None:
    out: list[Message] = []
    framer = _framer(out)
    for ts in range(3):
        framer.add(_record("GPU-1", float(ts)))
        framer.add(_record("GPU-2", float(ts)))
    assert [peek_header(m.value).keyframe for m in out] == [True, True, False, False, False, False]
    out.clear()
    framer.request_keyframe("GPU-2")
    framer.request_keyframe("GPU-unknown")  # ignored
    framer.add(_record("GPU-1", 3.0))
    framer.add(_record("GPU-2", 3.0))
    framer.add(_record("GPU-2", 4.0))
    assert [(peek_header(m.value).gpu, peek_header(m.value).keyframe) for m in out] == [
        ("GPU-1", False), ("GPU-2", True), ("GPU-2", False)]
    assert {m.key for m in out} == {b"node-a"}  # keyed by the node: a pod's GPUs on one partition
    out.clear()
    framer.request_keyframe(None)  # every GPU (after a reconnect, say)
    framer.add(_record("GPU-1", 5.0))
    framer.add(_record("GPU-2", 5.0))
    assert all(peek_header(m.value).keyframe for m in out)
    assert framer.stats().keyframe_requests_total == 3


def test_a_node_frame_carries_every_gpus_pending_records_when_one_is_due() -> None:
    out: list[Message] = []
    framer = Framer(out.append, node="node-a", instance="0123456789abcdef", window=2, max_delay_s=1.0,
                    keyframe_every=60)  # the default layout: node frames
    framer.add(_record("GPU-1", 10.0))
    framer.add(_record("GPU-2", 10.1))
    assert framer.flush_due(10.5) == 0 and not out  # nothing due yet
    assert framer.flush_due(11.0) == 1  # GPU-1's record is 1 s old: every GPU's records go with it
    framer.add(_record("GPU-2", 11.1))
    framer.add(_record("GPU-2", 12.1))  # GPU-2's window is full: GPU-1's (none) and its own go
    framer.stop()
    decoder = NodeFrameDecoder()
    frames = [decoder.decode(m.value) for m in out]
    assert [[(r.gpu, r.ts) for r in g] for f in frames for g in f] == [
        [("GPU-1", 10.0)], [("GPU-2", 10.1)], [("GPU-2", 11.1), ("GPU-2", 12.1)]]
    assert [peek_node_header(m.value).keyframe for m in out] == [True, False]
    assert framer.stats().frames_total == 2 and framer.stats().records_total == 4


def test_a_keyframe_request_makes_the_next_node_frame_a_keyframe() -> None:
    out: list[Message] = []
    framer = _framer(out, "node")
    for ts in range(3):
        framer.add(_record("GPU-1", float(ts)))
    framer.request_keyframe("GPU-2")  # any GPU of the node: its next frame carries them all
    framer.add(_record("GPU-1", 3.0))
    framer.add(_record("GPU-2", 3.0))  # a GPU the frame's table lacks: a keyframe too
    framer.add(_record("GPU-2", 4.0))
    assert [peek_node_header(m.value).keyframe for m in out] == [True, False, False, True, True, False]


def test_the_agents_deflate_setting_deflates_its_node_frames_and_a_keyframe_starts_a_new_context() -> None:
    from agent.settings import AgentSettings

    assert AgentSettings().frame_deflate  # the agent's default
    out: list[Message] = []
    framer = Framer(out.append, node="node-a", instance="0123456789abcdef", window=1, keyframe_every=60,
                    deflate=True)
    for ts in range(3):
        framer.add(_record("GPU-1", float(ts)))
    framer.request_keyframe(None)
    framer.add(_record("GPU-1", 3.0))
    assert [(peek_node_header(m.value).keyframe, peek_node_header(m.value).deflated) for m in out] == [
        (True, True), (False, True), (False, True), (True, True)]
    late = NodeFrameDecoder()  # joins at the requested keyframe: its context starts there
    assert [(r.gpu, r.ts) for g in late.decode(out[3].value) for r in g] == [("GPU-1", 3.0)]
