"""The agent's control listener: keyframe requests from the collector, over a real broker; bad ones skipped."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.control import ControlListener
from agent.kafka_settings import KafkaSettings
from telemetry.control import CONTROL_HEADERS, KeyframeRequest, control_topic
from tests.fixtures_kafka import BrokerFactory, create_topic
from tests.support.poll import wait_until


def _listener(got: list[str | None], bootstrap: str = "127.0.0.1:1") -> ControlListener:
    return ControlListener(KafkaSettings(bootstrap_servers=bootstrap, request_timeout_ms=2000), "node-a",
                           "abcd", got.append)


def test_requests_for_this_agent_are_acted_on_and_others_ignored() -> None:
    got: list[str | None] = []
    listener = _listener(got)
    for request in (KeyframeRequest("node-a", "GPU-1", "base lost", 1.0),
                    KeyframeRequest("node-a", None, "broker came back empty", 2.0, instance="abcd"),
                    KeyframeRequest("node-b", "GPU-1", "another node", 3.0),
                    KeyframeRequest("node-a", "GPU-2", "an earlier agent on this node", 4.0, instance="0000")):
        listener.handle(request.encode(), "test")
    assert got == ["GPU-1", None]
    stats = listener.stats()
    assert (stats.messages_total, stats.requests_total, stats.malformed_total) == (4, 2, 0)


@settings(max_examples=100, deadline=None)
@given(raw=st.one_of(st.binary(max_size=200), st.none(),
                     st.dictionaries(st.sampled_from(["type", "node", "gpu", "reason", "ts", "instance"]),
                                     st.one_of(st.none(), st.text(max_size=5), st.floats(), st.integers()))
                     .map(lambda d: json.dumps({"type": "keyframe_request", **d}).encode())))
def test_any_control_message_is_acted_on_or_counted_never_raises(raw: bytes | None) -> None:
    got: list[str | None] = []
    listener = _listener(got)
    listener.handle(raw, "test")
    stats = listener.stats()
    assert stats.malformed_total + stats.requests_total <= 1
    assert len(got) == stats.requests_total


def test_malformed_messages_are_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    listener = _listener([])
    with caplog.at_level(logging.WARNING, logger="agent.control"):
        for i in range(50):
            listener.handle(b"not json %d" % i, f"gpu.telemetry.control[0]@{i}")
    assert listener.stats().malformed_total == 50
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "gpu.telemetry.control[0]@0" in lines[0] and "not JSON" in lines[0]


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"node-a", headers=list(CONTROL_HEADERS))
    finally:
        await producer.stop()


def test_the_listener_reads_the_control_topic_of_a_real_broker(kafka_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = kafka_broker()
    topic = control_topic("gpu.telemetry")
    create_topic(broker.bootstrap, topic, partitions=2)
    got: list[str | None] = []
    listener = _listener(got, broker.bootstrap)
    listener.start()
    try:
        request = KeyframeRequest("node-a", "GPU-7", "dead-lettered a delta", time.time()).encode()
        def ask() -> bool:  # the listener starts at the topic's end: ask until it has its partitions
            if not got:
                asyncio.run(_produce(broker.bootstrap, topic, [request]))
            return bool(got)

        wait_until(ask, timeout=30, interval=0.3, what="a keyframe request to arrive")
        asyncio.run(_produce(broker.bootstrap, topic, [b"\xff garbage", request]))
        wait_until(lambda: listener.stats().malformed_total >= 1 and got.count("GPU-7") >= 2, timeout=20,
                   what="the garbage counted and the second request", details=listener.stats)
        assert set(got) == {"GPU-7"} and listener.stats().connected == 1
    finally:
        listener.stop()
    assert listener.stats().connected == 0
