"""The stream table's index of streams without an instance (older agents' frames)."""

from __future__ import annotations

from collector.streams import StreamId, StreamTable
from telemetry.codec import FrameDecoder


def test_streams_without_an_instance_are_found_by_partition_and_gpu_and_forgotten_with_them() -> None:
    table = StreamTable()
    a = table.install(StreamId(0, "n1", None, "GPU-a"), FrameDecoder(), 10, 1.0, now=1.0)
    b = table.install(StreamId(0, "n2", None, "GPU-a"), FrameDecoder(), 11, 1.0, now=1.0)
    table.install(StreamId(0, "n1", "i1", "GPU-a"), FrameDecoder(), 12, 1.0, now=1.0)  # has an instance
    c = table.install(StreamId(1, "n3", None, "GPU-a"), FrameDecoder(), 13, 1.0, now=1.0)
    table.install(StreamId(0, "n1", None, "GPU-a"), FrameDecoder(), 14, 2.0, now=2.0)  # a new base: same stream
    assert table.without_instance(0, "GPU-a") == [a, b]
    assert table.without_instance(1, "GPU-a") == [c] and table.without_instance(0, "GPU-b") == []
    table.touch(b, now=5000.0)
    for _ in range(20_000):
        table.touch(c, now=5000.0)  # partition 1 decodes on: its other streams could expire, it has none
    assert table.expire(now=5000.0, idle_s=600.0, idle_frames=0) == 2  # a and the instance stream, idle
    assert table.without_instance(0, "GPU-a") == [b]
    assert table.drop_partition(0) == 1
    assert table.without_instance(0, "GPU-a") == [] and table.without_instance(1, "GPU-a") == [c]
    assert len(table) == 1
