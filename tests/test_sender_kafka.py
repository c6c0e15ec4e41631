"""The agent's Kafka sender against a real Kafka-protocol broker (tansu): normal flow and faults.

Every case checks what a consumer of the topic sees: each message exactly once (or, where a
broker dies mid-request, at least once), each GPU key on one partition, each key's
messages in the order they were submitted.

``GPUWATCH_TEST_OUTAGE_S`` sets the broker outage of the restart case (default 3 s; the
end-to-end run uses 30).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.partitioner import murmur2
from pydantic import SecretStr, ValidationError

from agent.kafka_settings import KafkaSettings
from agent.sender import Sender
from agent.spool import Spool
from telemetry.wire import Message
from tests.fixtures_kafka import BrokerFactory, Consumed, consume_all, create_topic
from tests.support.poll import wait_until

TOPIC = "gpu.telemetry"
KEYS = [f"GPU-{k:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b".encode() for k in range(8)]
OUTAGE_S = float(os.environ.get("GPUWATCH_TEST_OUTAGE_S", "3"))


def settings(bootstrap: str, **overrides: Any) -> KafkaSettings:
    """Short timeouts so that an outage is noticed, and the broker's return seen, within a second or two."""
    values: dict[str, Any] = {"bootstrap_servers": bootstrap, "request_timeout_ms": 1500,
                              "reconnect_backoff_ms": 100, "reconnect_backoff_max_ms": 800, "linger_ms": 5}
    return KafkaSettings(**(values | overrides))


def frame(i: int, key: bytes | None = None) -> Message:
    """Message ``i`` (a global counter) for key ``i % 8``; the value carries ``i``."""
    return Message(key or KEYS[i % len(KEYS)], b"%08d|" % i + b"f" * 200, (("codec", b"1"), ("n", b"%d" % i)))


def number(value: bytes | None) -> int:
    assert value is not None
    return int(value.split(b"|", 1)[0])


def wait_for(probe: Callable[[], object], timeout: float, what: str) -> None:
    wait_until(lambda: bool(probe()), timeout=timeout, interval=0.02, what=what)


def check_delivery(got: list[Consumed], expected: Iterable[int], *, exactly_once: bool = True) -> dict[str, int]:
    """Each expected message arrived (exactly once), keyed right, one partition per key, in per-key order."""
    expected = list(expected)
    numbers = [number(c.value) for c in got]
    assert set(numbers) == set(expected), (
        f"missing {sorted(set(expected) - set(numbers))[:20]}, unexpected {sorted(set(numbers) - set(expected))[:20]}")
    duplicates = len(numbers) - len(set(numbers))
    if exactly_once:
        assert duplicates == 0, f"{duplicates} duplicates"
    by_key: dict[bytes | None, list[Consumed]] = defaultdict(list)
    for c in sorted(got, key=lambda c: (c.partition, c.offset)):
        by_key[c.key].append(c)
    for key, records in by_key.items():
        assert {c.partition for c in records} == {records[0].partition}, f"{key!r} spread over partitions"
        seen: set[int] = set()
        firsts = []
        for c in records:
            n = number(c.value)
            assert key == KEYS[n % len(KEYS)]
            assert dict(c.headers) == {"codec": b"1", "n": b"%d" % n}
            if n not in seen:
                seen.add(n)
                firsts.append(n)
        assert firsts == sorted(firsts), f"{key!r} out of order: {firsts[:50]}"
    return {"messages": len(numbers), "duplicates": duplicates}


class RecordingSpool(Spool):
    """A spool that remembers which threads did its disk I/O."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.io_threads: set[str] = set()
        super().__init__(*args, **kwargs)

    def _note(self) -> None:
        self.io_threads.add(threading.current_thread().name)

    def append(self, msgs: Iterable[Message]) -> int:
        self._note()
        return super().append(msgs)

    def read(self, n: int, max_bytes: int | None = None) -> tuple[int, list[Message]]:
        self._note()
        return super().read(n, max_bytes)

    def commit_until(self, seq: int) -> int:
        self._note()
        return super().commit_until(seq)

    def sync(self) -> None:
        self._note()
        super().sync()


class Sampler:
    """A sampling thread: submits frames at a steady rate, timing each ``submit`` call."""

    def __init__(self, sender: Sender, rate_hz: float = 400.0) -> None:
        self.sender = sender
        self.period = 1.0 / rate_hz
        self.count = 0
        self.max_submit_s = 0.0
        self._run = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._run.wait(0.05)
                next_t = time.monotonic()
                continue
            self._idle.clear()
            msg = frame(self.count)
            t0 = time.perf_counter()
            self.sender.submit(msg)
            self.max_submit_s = max(self.max_submit_s, time.perf_counter() - t0)
            self.count += 1
            next_t += self.period
            time.sleep(max(0.0, next_t - time.monotonic()))

    def start(self) -> Sampler:
        self._run.set()
        self.thread.start()
        return self

    def pause(self) -> None:
        self._run.clear()
        self._idle.wait(5)

    def resume(self) -> None:
        self._run.set()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()
        self.thread.join(5)


def _streaming_then_paused(sender: Sender, rate_hz: float, delivered: int) -> Sampler:
    """A sampler that ran until ``delivered`` messages were acknowledged, now paused with nothing in flight."""
    sampler = Sampler(sender, rate_hz=rate_hz).start()
    try:
        wait_for(lambda: sender.stats()["sent_total"] >= delivered, 15, "delivery before the outage")
        sampler.pause()
        assert sender.flush(10)
    except BaseException:
        sampler.stop()
        raise
    return sampler


@pytest.fixture
def senders() -> Iterator[list[Sender]]:
    """Senders a test starts; stopped at teardown (quickly) if the test did not."""
    made: list[Sender] = []
    yield made
    for sender in made:
        if sender._done is not None and not sender._done.done():
            sender.stop(timeout=0.5)


# ------------------------------------------------------------------ settings


def test_settings_keep_secrets_out_of_repr_and_read_the_password_file(tmp_path: Path) -> None:
    secret = "s3cr3t-pa55"
    s = KafkaSettings(bootstrap_servers="a:9092, b:9092", security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_username="agent", sasl_password=SecretStr(secret))
    assert secret not in repr(s) and secret not in str(s) and secret not in s.model_dump_json()
    config = s.producer_config()
    assert config["sasl_plain_password"] == secret
    assert config["bootstrap_servers"] == ["a:9092", "b:9092"]
    assert config["acks"] == "all" and config["compression_type"] == "zstd"
    password_file = tmp_path / "password"
    password_file.write_text("from-a-secret\n")
    s2 = KafkaSettings(bootstrap_servers="a:9092", security_protocol="SASL_PLAINTEXT", sasl_username="agent",
                       sasl_password_file=password_file)
    assert s2.producer_config()["sasl_plain_password"] == "from-a-secret"
    assert KafkaSettings(bootstrap_servers="a:1", compression="none").producer_config()["compression_type"] is None


@pytest.mark.parametrize("bad", [
    {"security_protocol": "SASL_SSL"},  # no username
    {"security_protocol": "SASL_SSL", "sasl_username": "u"},  # no password
    {"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": "p", "sasl_password_file": "/p"},
    {"acks": "1"},
    {"compression": "brotli"},
    {"ssl_keyfile": "/k"},
    {"reconnect_backoff_ms": 1000, "reconnect_backoff_max_ms": 500},
    {"bootstrap_servers": ""},
])
def test_settings_refuse_inconsistent_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        KafkaSettings(**({"bootstrap_servers": "a:9092"} | bad))


def test_tls_settings_build_an_ssl_context(tmp_path: Path) -> None:
    config = KafkaSettings(bootstrap_servers="a:9093", security_protocol="SSL",
                           ssl_check_hostname=False).producer_config()
    assert config["ssl_context"].check_hostname is False


def test_submit_rejects_a_message_kafka_would_refuse(tmp_path: Path) -> None:
    sender = Sender(settings("127.0.0.1:1", max_request_bytes=4096), tmp_path / "spool")
    with pytest.raises(ValueError, match="max_request_bytes"):
        sender.submit(Message(b"k", b"x" * 5000))
    sender.submit(frame(0))
    sender.stop()  # never started: what was submitted goes to the spool
    with Spool(tmp_path / "spool") as spool:
        assert spool.peek(5) == [frame(0)]


class _FakeBatch:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def append(self, *, key: bytes, value: bytes, timestamp: None, headers: list[tuple[str, bytes]]) -> object:
        if len(self.values) >= 3:
            return None  # full: the sender starts another batch
        self.values.append(value)
        return object()


class _RejectingProducer:
    """Stands in for a broker that refuses one record (tansu enforces no record size limit)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[bytes]]] = []
        self.singles: list[bytes] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def create_batch(self) -> _FakeBatch:
        return _FakeBatch()

    def _answer(self, values: list[bytes]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if b"poison" in values:
            future.set_exception(MessageSizeTooLargeError())
        else:
            future.set_result(None)
        return future

    async def send_batch(self, batch: _FakeBatch, topic: str, *, partition: int) -> asyncio.Future[None]:
        self.batches.append((partition, batch.values))
        return self._answer(batch.values)

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: list[Any],
                   partition: int) -> asyncio.Future[None]:
        self.singles.append(value)
        return self._answer([value])


def test_a_record_the_broker_refuses_is_isolated_and_the_rest_delivered(tmp_path: Path) -> None:
    sender = Sender(settings("127.0.0.1:1"), tmp_path / "spool")
    producer = _RejectingProducer()
    msgs = [Message(b"k", b"v%d" % i) for i in range(7)]
    msgs[4] = Message(b"k", b"poison")
    results = asyncio.run(sender._send_all(producer, msgs))
    assert [type(r) for r in results] == [type(None)] * 4 + [MessageSizeTooLargeError] + [type(None)] * 2
    # one partition for the key, batches of three in order; the refused batch was resent one by one
    assert [values for _, values in producer.batches] == [[b"v0", b"v1", b"v2"], [b"v3", b"poison", b"v5"], [b"v6"]]
    assert len({p for p, _ in producer.batches}) == 1
    assert producer.singles == [b"v3", b"poison", b"v5"]
    sender.stop()


# ------------------------------------------------------------------ against tansu


@pytest.mark.parametrize("compression", ["zstd", "lz4", "gzip", "none"])
def test_normal_flow_delivers_every_message_once_in_key_order(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender], compression: str,
) -> None:
    broker = kafka_broker()
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    spool = RecordingSpool(tmp_path / "spool")
    sender = Sender(settings(broker.bootstrap, compression=compression), spool)
    senders.append(sender)
    sender.start()
    wait_for(lambda: sender.connected, 10, "the first connection")
    n = 2000
    for i in range(n):
        sender.submit(frame(i))
    assert sender.flush(20), sender.stats()
    got = consume_all(broker.bootstrap, TOPIC, n, timeout=20)
    check_delivery(got, range(n))
    # the partition is Kafka's default for the key (murmur2), as a Java or librdkafka producer would pick
    assert all(c.partition == (murmur2(c.key or b"") & 0x7FFFFFFF) % 4 for c in got)
    assert {c.partition for c in got} == {(murmur2(k) & 0x7FFFFFFF) % 4 for k in KEYS}
    stats = sender.stats()
    assert stats["sent_total"] == n and stats["dropped_total"] == 0 and stats["spool_messages"] == 0
    assert stats["connected"] == 1
    sender.stop(5)
    spool.close()
    assert spool.io_threads == {"gpuwatch-spool_0"}  # the sender's one spool worker did all disk I/O


def _outage(broker: Any, sender: Sender, sampler: Sampler) -> dict[str, Any]:
    """Stop the broker with no request in flight, let the sampler stream into the outage for
    ``OUTAGE_S`` once the sender noticed it; the sender's stats at the end of it."""
    broker.stop()
    sampler.resume()
    wait_for(lambda: not sender.connected, 15, "the sender to notice the outage")
    time.sleep(OUTAGE_S)
    return sender.stats()


def test_outage_spools_and_replays_in_order_exactly_once(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    spool = RecordingSpool(tmp_path / "spool")
    keyframes: list[str] = []
    sender = Sender(settings(broker.bootstrap), spool, spool_after_ms=500, on_keyframe_needed=keyframes.append)
    senders.append(sender)
    sender.start()
    # No request in flight at the moment the broker goes: a lost acknowledgement would make
    # a resend (at-least-once); that case is the kill test below.
    sampler = _streaming_then_paused(sender, 400.0, 300)
    try:
        during = _outage(broker, sender, sampler)
        assert during["spooled_total"] > 0 and during["spool_messages"] > 0, during
        broker.start()
        wait_for(lambda: sender.stats()["replayed_total"] > 0, 20, "replay after the broker's return")
        time.sleep(0.5)  # frames keep coming while the spool drains: they must queue behind it
    finally:
        sampler.stop()
    assert sender.flush(30), sender.stats()
    got = consume_all(broker.bootstrap, TOPIC, sampler.count, timeout=30)
    check_delivery(got, range(sampler.count))
    stats = sender.stats()
    assert stats["sent_total"] == sampler.count
    assert stats["replayed_total"] >= during["spool_messages"]
    assert stats["dropped_total"] == 0 and stats["send_errors_total"] > 0
    # keyframes: the spooled frames start with one, and the stream resumes with one after the replay
    assert keyframes[:2] == ["connected to Kafka", "Kafka unreachable"], keyframes
    assert "the spool's replay is done" in keyframes[keyframes.index("connected to Kafka", 1):], keyframes
    sender.stop(5)
    spool.close()
    # Structural: the sampling thread never touched the disk (nor could it wait on the spool's lock).
    assert spool.io_threads == {"gpuwatch-spool_0"}
    print(f"outage {OUTAGE_S} s: {sampler.count} messages, {during['spooled_total']} spooled, "
          f"max submit {sampler.max_submit_s * 1e3:.3f} ms")


def test_a_slow_broker_spools_behind_the_batch_in_flight_and_sends_nothing_twice(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    broker = kafka_broker()
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    sender = Sender(settings(broker.bootstrap, request_timeout_ms=6000), tmp_path / "spool", spool_after_ms=200)
    senders.append(sender)
    sender.start()
    sampler = Sampler(sender).start()
    try:
        wait_for(lambda: sender.stats()["sent_total"] >= 200, 15, "delivery before the broker hangs")
        broker.pause()  # requests wait unanswered, well within the request timeout
        wait_for(lambda: sender.stats()["spooled_total"] > 0, 10, "frames waiting too long to go to the spool")
        time.sleep(0.5)
        broker.resume()  # the batch in flight is acknowledged late; what queued behind it replays
        wait_for(lambda: sender.stats()["replayed_total"] > 0, 15, "replay after the broker recovers")
    finally:
        broker.resume()
        sampler.stop()
    assert sender.flush(20), sender.stats()
    got = consume_all(broker.bootstrap, TOPIC, sampler.count, timeout=20)
    check_delivery(got, range(sampler.count))
    stats = sender.stats()
    assert stats["send_errors_total"] == 0 and stats["sent_total"] == sampler.count, stats
    print("slow broker:", stats)
    sender.stop(5)


def test_broker_killed_mid_stream_loses_nothing_and_keeps_key_order(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    sender = Sender(settings(broker.bootstrap), tmp_path / "spool", spool_after_ms=500)
    senders.append(sender)
    sender.start()
    sampler = Sampler(sender).start()
    try:
        wait_for(lambda: sender.stats()["sent_total"] >= 300, 15, "delivery before the kill")
        broker.kill()  # requests in flight: acknowledgements may be lost after the write
        wait_for(lambda: not sender.connected, 10, "the sender to notice the kill")
        time.sleep(1.0)
        broker.start()
        wait_for(lambda: sender.stats()["replayed_total"] > 0, 20, "replay after the broker's return")
    finally:
        sampler.stop()
    assert sender.flush(30), sender.stats()
    got = consume_all(broker.bootstrap, TOPIC, sampler.count, timeout=30)
    result = check_delivery(got, range(sampler.count), exactly_once=False)
    print(f"kill: {result['messages']} records for {sampler.count} messages, {result['duplicates']} duplicates")
    sender.stop(5)


def test_full_spool_drops_the_oldest_counts_them_and_delivers_the_rest_in_order(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    spool = Spool(tmp_path / "spool", max_bytes=3 * 4096, segment_bytes=4096)  # ~50 messages
    sender = Sender(settings(broker.bootstrap), spool)
    senders.append(sender)
    sender.start()
    before = 50
    for i in range(before):
        sender.submit(frame(i))
    assert sender.flush(15)
    broker.stop()
    total = 600
    for i in range(before, total):
        sender.submit(frame(i))
    wait_for(lambda: sender.stats()["memory_messages"] == 0 and spool.dropped_total > 0, 15,
             "the outage's messages to reach the full spool")
    dropped = sender.stats()["dropped_total"]
    assert spool.bytes <= 3 * 4096
    broker.start()
    assert sender.flush(20), sender.stats()
    kept = total - before - dropped
    got = consume_all(broker.bootstrap, TOPIC, before + kept, timeout=20)
    # the oldest frames of the outage went first: what arrives is the newest ``kept``, in order
    check_delivery(got, [*range(before), *range(total - kept, total)])
    assert sender.stats()["dropped_total"] == dropped > 0
    sender.stop(5)
    spool.close()


def test_stop_while_kafka_is_down_persists_and_the_next_sender_delivers(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    first = Sender(settings(broker.bootstrap), tmp_path / "spool")
    senders.append(first)
    first.start()
    for i in range(20):
        first.submit(frame(i))
    assert first.flush(15)
    broker.stop()
    for i in range(20, 320):
        first.submit(frame(i))
    first.stop(timeout=2.0)  # the agent shuts down during the outage
    with Spool(tmp_path / "spool") as spool:
        assert [number(m.value) for m in spool.peek(1000)] == list(range(20, 320))
    first.submit(frame(320))  # a straggler after stop: the spool is closed, so it is counted as dropped
    assert first.stats()["memory_dropped_total"] == 1

    broker.start()
    second = Sender(settings(broker.bootstrap), tmp_path / "spool")  # the agent's next start
    senders.append(second)
    second.start()
    assert second.flush(20), second.stats()
    got = consume_all(broker.bootstrap, TOPIC, 320, timeout=20)
    check_delivery(got, range(320))
    assert second.stats()["replayed_total"] == 300
    second.stop(5)


def test_runs_as_a_task_on_a_given_loop(kafka_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = kafka_broker()
    create_topic(broker.bootstrap, TOPIC, partitions=2)

    async def main() -> dict[str, int | bool]:
        sender = Sender(settings(broker.bootstrap), tmp_path / "spool", loop=asyncio.get_running_loop())
        sender.start()
        for i in range(100):
            sender.submit(frame(i))
        assert await sender.aflush(15)
        await sender.astop(5)
        return sender.stats()

    stats = asyncio.run(main())
    assert stats["sent_total"] == 100
    check_delivery(consume_all(broker.bootstrap, TOPIC, 100, timeout=15), range(100))


def test_a_full_disk_during_an_outage_loses_nothing_and_logs_once(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka is down and the spool's disk is full: messages wait in memory, spool writes back off
    instead of failing five times a second, a line or two is logged, and once the disk and the broker
    are back every message arrives once, in order."""
    import errno

    from agent import spool as spool_module

    disk_full = threading.Event()
    real_write = spool_module._write

    def write(fd: int, data: bytes | memoryview) -> int:
        if disk_full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(spool_module, "_write", write)
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=4)
    sender = Sender(settings(broker.bootstrap), tmp_path / "spool", spool_after_ms=300)
    senders.append(sender)
    sender.start()
    sampler = _streaming_then_paused(sender, 200.0, 100)
    try:
        disk_full.set()
        broker.stop()
        with caplog.at_level(logging.WARNING, logger="agent"):
            sampler.resume()
            wait_for(lambda: sender.stats()["write_errors_total"] >= 2, 15, "spool writes to fail")
            time.sleep(2.0)
        during = sender.stats()
        assert during["memory_messages"] > 0 and during["memory_dropped_total"] == 0, during
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("agent")]
        assert 1 <= len(errors) <= 3, [r.getMessage() for r in errors]  # not one per attempt
        assert "wait in memory" in errors[0].getMessage()
        disk_full.clear()
        broker.start()
        wait_for(lambda: sender.stats()["replayed_total"] > 0 or sender.stats()["spool_messages"] == 0, 30,
                 "delivery after the disk and the broker are back")
    finally:
        sampler.stop()
    assert sender.flush(30), sender.stats()
    got = consume_all(broker.bootstrap, TOPIC, sampler.count, timeout=30)
    check_delivery(got, range(sampler.count))
    stats = sender.stats()
    assert stats["memory_dropped_total"] == 0 and stats["dropped_total"] == 0 and stats["corrupt_total"] == 0
    sender.stop(5)


def test_a_transport_over_its_budget_still_reconnects_and_replays(
    kafka_broker: BrokerFactory, tmp_path: Path, senders: list[Sender],
) -> None:
    """The transport's budget delays discretionary work by at most one wait in a row: with a
    budget no real work fits in (the spooling of an outage, which may not wait, keeps the bucket
    empty), the sender still reconnects and replays after the broker is back. Before, it waited
    for a full bucket that never came (the fault harness: nothing after a 30-s outage delivered)."""
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    sender = Sender(settings(broker.bootstrap), tmp_path / "spool", spool_after_ms=200, transport_cpu_budget=1e-6)
    senders.append(sender)
    sender.start()
    sampler = _streaming_then_paused(sender, 100.0, 50)
    try:
        _outage(broker, sender, sampler)
        broker.start()
        wait_for(lambda: sender.stats()["replayed_total"] > 0, 45, "the replay, however tight the budget")
    finally:
        sampler.stop()
    assert sender.flush(60), sender.stats()
    check_delivery(consume_all(broker.bootstrap, TOPIC, sampler.count, timeout=30), range(sampler.count))
    assert sender.stats()["paced_seconds_total"] > 0  # it did wait for the budget, once at a time
