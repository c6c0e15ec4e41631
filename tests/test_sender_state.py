"""The sender's decisions by time, on fake time: no broker, no sleep (issue 13, item 4).

Memory's age and bounds (:mod:`agent.sender_memory`), the reconnect and spool-write backoffs,
the stop deadline, the one-wait-in-a-row budget rule and the keyframe requests
(:mod:`agent.sender_state`), a round's settlement (:mod:`agent.batching`) and the spool side's
backoff on a refusing disk (:mod:`agent.sender_spool`), each driven by made-up ``now`` values.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from agent import spool as spool_module
from agent.batching import Round, commit_end, settle
from agent.kafka_settings import KafkaSettings
from agent.scheduler import CpuPacer
from agent.sender import Sender
from agent.sender_memory import OVERFLOW, Memory
from agent.sender_spool import SpoolSide
from agent.sender_state import SPOOL_RETRY_S, Backoff, Breaks, BudgetGate, StopDeadline, Tally
from agent.spool import Spool
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message


def msg(i: int, size: int = 10) -> Message:
    return Message(b"GPU-%d" % (i % 4), b"%06d" % i + b"x" * max(0, size - 6))


def values(msgs: list[Message]) -> list[int]:
    return [int(m.value[:6]) for m in msgs]


# ------------------------------------------------------------------ memory


def test_memory_goes_to_the_spool_once_its_oldest_waited_spool_after_and_a_taken_batch_restarts_the_age() -> None:
    memory = Memory(max_messages=100, max_bytes=1 << 20, spool_after_s=2.0)
    assert not memory.wants_spool(0.0)  # empty: nothing to spool however late
    memory.put(msg(0), now=100.0)
    memory.put(msg(1), now=101.5)  # the age is the oldest's, not the newest's
    assert not memory.wants_spool(102.0)
    assert memory.wants_spool(102.1)
    assert values(memory.take_batch(1, 1 << 20, now=105.0)) == [0]
    assert memory.inflight == 1
    assert not memory.wants_spool(107.0)  # what remains counts from when the batch was taken
    assert memory.wants_spool(107.1)


def test_memory_wakes_the_loop_once_over_a_bound_or_when_it_waits_idle() -> None:
    memory = Memory(max_messages=2, max_bytes=1 << 20, spool_after_s=60.0)
    assert memory.put(msg(0), 0.0) is False and memory.put(msg(1), 0.0) is False  # at the bound
    assert memory.put(msg(2), 0.0) is True  # over it: the loop spools
    assert memory.wants_spool(0.0)  # by the bound, not the age
    assert memory.put(msg(3), 0.0) is False  # a wake-up is already on its way
    memory.wake_pending = False  # the loop woke
    memory.take_all()
    memory.settled(4, (), 0.0)
    assert memory.take_batch(10, 1 << 20, 1.0) == [] and memory.idle_waiting  # nothing: the loop idles
    assert memory.put(msg(4), 1.0) is True  # so the next message wakes it
    memory.finish()
    assert memory.put(msg(5), 2.0) is None  # after stop: the caller spools it itself


def test_memory_drops_its_oldest_only_past_four_times_its_bound_and_a_drop_asks_for_keyframes() -> None:
    memory = Memory(max_messages=3, max_bytes=1 << 20, spool_after_s=2.0)
    breaks = Breaks(drops=memory.dropped)
    for i in range(OVERFLOW * 3):
        memory.put(msg(i), float(i))
    assert memory.dropped == 0 and breaks.dropped(memory.dropped) is None
    memory.put(msg(12), 12.0)
    memory.put(msg(13), 13.0)
    assert memory.dropped == 2
    assert values(memory.take_all()) == list(range(2, 14))  # the two oldest went
    assert breaks.dropped(memory.dropped) == "frames were dropped"
    assert breaks.dropped(memory.dropped) is None  # asked once per new drop, not on every look


def test_what_the_spool_did_not_take_returns_to_the_head_of_memory_in_order_and_counts_from_then() -> None:
    memory = Memory(max_messages=100, max_bytes=1 << 20, spool_after_s=2.0)
    memory.put(msg(0), 10.0)
    memory.put(msg(1), 10.0)
    taken = memory.take_all()
    memory.put(msg(2), 11.0)  # submitted while the spool write ran
    assert memory.busy() and memory.moving == 2
    memory.settled(2, taken, now=30.0)  # the disk refused both
    assert memory.moving == 0 and memory.level() == (3, 3 * msg(0).size)
    assert not memory.wants_spool(31.9) and memory.wants_spool(32.1)  # retried by age from the give-back
    assert values(memory.take_batch(10, 1 << 20, 33.0)) == [0, 1, 2]


def test_a_send_that_failed_unexpectedly_gives_its_unspooled_part_back_to_the_head_of_memory() -> None:
    memory = Memory(max_messages=100, max_bytes=1 << 20, spool_after_s=2.0)
    for i in range(4):
        memory.put(msg(i), 0.0)
    batch = Round(memory.take_batch(3, 1 << 20, 1.0), None, from_spool=False)
    batch.spooled(0, first=7, written=1)  # message 0 reached the spool during an overflow
    memory.abort_inflight(batch.msgs[batch.unspooled():])
    assert memory.inflight == 0
    assert values(memory.take_all()) == [1, 2, 3]


def test_the_sender_reads_memory_age_from_its_clock(tmp_path: Path) -> None:
    now = [500.0]
    sender = Sender(KafkaSettings(bootstrap_servers="127.0.0.1:1"), tmp_path / "spool", spool_after_ms=300,
                    clock=lambda: now[0])
    try:
        sender.submit(msg(0))
        now[0] += 0.29
        assert not sender._memory_wants_spool()
        now[0] += 0.02
        assert sender._memory_wants_spool()
        assert sender._pacer.wall_clock() == now[0]  # the budget's refill runs on the same clock
    finally:
        sender.stop(1.0)
    with Spool(tmp_path / "spool") as spool:
        assert spool.peek(5) == [msg(0)]


# ------------------------------------------------------------------ backoffs, deadline, budget


def test_reconnects_back_off_from_the_first_delay_doubling_to_the_ceiling_and_reset_after_a_sent_round() -> None:
    settings = KafkaSettings(bootstrap_servers="a:1", reconnect_backoff_ms=500, reconnect_backoff_max_ms=3_000)
    backoff = Backoff(settings.reconnect_backoff_ms / 1000.0, settings.reconnect_backoff_max_ms / 1000.0)
    assert backoff.due(0.0)  # the first attempt at once
    now = 1_000.0
    waits = []
    for _ in range(5):
        waits.append(backoff.failed(now))
        assert not backoff.due(now + waits[-1] - 0.001) and backoff.due(now + waits[-1])
        now += waits[-1]
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.wait(now - 2.0, poll=0.2) == 0.2  # while waiting, memory is looked at every spool_poll
    assert backoff.wait(now - 0.05, poll=0.2) == pytest.approx(0.05)
    assert backoff.succeeded() is True  # the delays had grown
    assert backoff.failed(now) == 0.5
    assert Backoff(*SPOOL_RETRY_S).succeeded() is False


def test_the_stop_deadline_ends_the_loop_when_disconnected_drained_or_past() -> None:
    stop = StopDeadline()
    asked: list[bool] = []

    def drained() -> bool:
        asked.append(True)
        return False

    assert not stop.finished(10.0, connected=False, drained=drained) and not stop.passed(1e9)
    assert asked == []  # not asked while not stopping (it takes locks)
    stop.request(now=50.0, timeout=2.0)
    assert stop.finished(50.0, connected=False, drained=drained)  # nothing to deliver with: spool and end
    assert not stop.finished(51.9, connected=True, drained=drained) and not stop.passed(51.9)
    assert stop.finished(51.9, connected=True, drained=lambda: True)
    assert stop.passed(52.0) and stop.finished(52.0, connected=True, drained=drained)
    assert stop.left(51.5) == 1.0 and stop.left(49.0) == 3.0  # closing the producer gets at least a second


def test_deferrable_work_waits_for_the_budget_at_most_once_in_a_row() -> None:
    wall, cpu = [0.0], [0.0]
    pacer = CpuPacer(0.01, cpu_clock=lambda: cpu[0], wall_clock=lambda: wall[0], burst_s=10.0, max_delay_s=5.0)
    gate = BudgetGate(pacer)
    assert gate.delay("connect", stopping=False) == 0.0  # the bucket starts full
    cpu[0] += 0.5  # spooling an outage (work that may not wait) ran it far below zero
    wait = gate.delay("connect", stopping=False)
    assert wait == 5.0  # the debt is capped at one longest wait
    wall[0] += wait
    gate.waited("connect", wait)
    assert gate.delay("connect", stopping=False) == 0.0  # it waited once: now it runs
    cpu[0] += 0.5
    assert gate.delay("replay", stopping=False) > 0  # other work still waits
    assert gate.delay("replay", stopping=True) == 0.0  # not while stopping
    assert pacer.waited_s == 5.0


# ------------------------------------------------------------------ keyframes, settlement


def test_keyframes_are_asked_when_kafka_goes_away_once_on_every_connect_and_when_a_replay_ends() -> None:
    breaks = Breaks()
    assert breaks.unreachable() == "Kafka unreachable" and breaks.down
    assert breaks.unreachable() is None  # still away: not again on every failed attempt
    assert breaks.connected() == "connected to Kafka" and not breaks.down
    assert breaks.round_sent(spool_empty=True) is None  # nothing was replayed
    breaks.replayed()
    assert breaks.round_sent(spool_empty=False) is None  # the replay goes on
    assert breaks.round_sent(spool_empty=True) == "the spool's replay is done"
    assert breaks.round_sent(spool_empty=True) is None
    assert breaks.unreachable() == "Kafka unreachable"


def test_a_rounds_results_sort_into_delivered_dropped_and_to_be_spooled() -> None:
    msgs = [msg(i) for i in range(5)]
    lost = KafkaConnectionError()
    batch = Round(msgs, [20, 21, None, None, None], from_spool=False)
    done = settle(batch, [None, lost, MessageSizeTooLargeError(), None, lost])
    assert done.delivered == 2 and done.not_acked == 2 and done.first_error is lost
    assert [m for m, _ in done.rejected] == [msgs[2]]  # refused for itself: dropped, not resent
    assert done.done_seqs == [20]  # committable; 21 failed and stays in the spool for the resend
    assert done.failed == [msgs[4]]  # failed and not in the spool: it goes there
    assert commit_end(20, {20, 22}) == 21 and commit_end(19, {20}) == 19


def test_a_batch_overflowing_into_the_spool_gets_the_sequence_numbers_of_its_unspooled_part() -> None:
    batch = Round([msg(i) for i in range(4)], None, from_spool=False)
    batch.spooled(0, first=100, written=2)  # the disk took two
    assert batch.seqs == [100, 101, None, None] and batch.unspooled() == 2
    batch.spooled(2, first=102, written=9)  # all of it, and memory behind it
    assert batch.seqs == [100, 101, 102, 103] and batch.unspooled() == 4


# ------------------------------------------------------------------ the spool side on a refusing disk


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


def test_a_refusing_disk_is_tried_again_after_one_second_doubling_and_memory_keeps_the_order(
    tmp_path: Path, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    full = [True]
    real_write = spool_module._write

    def write(fd: int, data: bytes | memoryview) -> int:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(spool_module, "_write", write)
    now = [100.0]
    memory = Memory(max_messages=100, max_bytes=1 << 20, spool_after_s=2.0)
    tally = Tally()
    with Spool(tmp_path / "spool") as spool:
        side = SpoolSide(spool, memory, io, tally, RateLimitedLog(logging.getLogger("agent.sender"),
                                                                  clock=lambda: now[0]), lambda: now[0])

        async def attempt(head: list[Message] | None = None) -> tuple[int, int] | None:
            return await side.to_spool(head or [])

        memory.put(msg(0), now[0])
        memory.put(msg(1), now[0])
        with caplog.at_level(logging.ERROR, logger="agent.sender"):
            assert asyncio.run(attempt()) is None  # refused: back to memory
        assert "next spool write in 1 s" in caplog.text
        assert side.blocked() and memory.level()[0] == 2 and tally.spooled == 0
        now[0] += 0.5
        assert asyncio.run(attempt([msg(9)])) is None  # blocked: not even tried; the head goes in front
        assert memory.level()[0] == 3
        now[0] += 0.5
        assert not side.blocked()
        assert asyncio.run(attempt()) is None  # refused again: 2 s now
        now[0] += 1.9
        assert side.blocked()
        now[0] += 0.1
        full[0] = False
        assert asyncio.run(attempt()) == (0, 3)
        assert tally.spooled == 3 and side.retry.delay == SPOOL_RETRY_S[0]  # back to 1 s
        assert values(spool.peek(5)) == [9, 0, 1]
