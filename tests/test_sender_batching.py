"""The sender's pure batching decisions, and the sender itself on fake time (issue 13, item 4)."""

from __future__ import annotations

from pathlib import Path

from agent.batching import PartitionOf, Round, memory_wants_spool
from agent.kafka_settings import KafkaSettings
from agent.sender import Sender
from telemetry.wire import Message


def test_memory_goes_to_the_spool_over_a_bound_or_when_its_oldest_waited_too_long() -> None:
    assert not memory_wants_spool(0, 0, 99.0, 10, 1000, 2.0)  # nothing waits
    assert not memory_wants_spool(10, 1000, 2.0, 10, 1000, 2.0)  # at the bounds, not over
    assert memory_wants_spool(11, 10, 0.0, 10, 1000, 2.0)
    assert memory_wants_spool(1, 1001, 0.0, 10, 1000, 2.0)
    assert memory_wants_spool(1, 10, 2.5, 10, 1000, 2.0)


def test_a_round_knows_its_first_unspooled_message_and_partitions_are_stable() -> None:
    msgs = [Message(b"k", b"v", ()) for _ in range(3)]
    assert Round(msgs, None, False).unspooled() == 0
    assert Round(msgs, [4, 5, None], False).unspooled() == 2
    assert Round(msgs, [4, 5, 6], True).unspooled() == 3
    partition_of = PartitionOf(max_keys=1)
    first = [partition_of(f"GPU-{i}".encode(), [0, 1, 2, 3]) for i in range(8)]
    assert first == [partition_of(f"GPU-{i}".encode(), [0, 1, 2, 3]) for i in range(8)]  # after cache clears


def test_the_sender_on_fake_time_spools_memory_once_it_waited_spool_after_ms(tmp_path: Path) -> None:
    now = [1000.0]
    sender = Sender(KafkaSettings(bootstrap_servers="127.0.0.1:1"), tmp_path / "spool", spool_after_ms=2_000,
                    clock=lambda: now[0])
    try:
        sender.submit(Message(b"GPU-0", b"frame", ()))
        assert not sender._memory_wants_spool()
        now[0] += 1.9
        assert not sender._memory_wants_spool()
        now[0] += 0.2  # 2.1 s after the message came: no real second passed
        assert sender._memory_wants_spool()
    finally:
        sender.stop(1.0)
