"""End to end: simulated agents -> Kafka (tansu) -> `gpuwatch collector` -> PostgreSQL.

Every sample an agent produced is counted against every row stored, under the faults the
issue names: broker down for 30 s, collector SIGKILLed mid-batch, PostgreSQL restarted,
garbage and truncated frames in the topic. Each case ends with nothing lost and nothing
duplicated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agent.driver.simulated import SimulatedFleet
from agent.framing import Framer
from agent.kafka_settings import KafkaSettings
from agent.runtime import Agent, ScheduleConfig, new_instance_id
from agent.sender import Sender
from agent.simulate.attribution import SimulatedAttribution
from telemetry.records import GpuRecord
from tests.fixtures_kafka import consume_all, create_topic
from tests.support.poll import wait_until

TOPIC = "gpu.telemetry"
ROOT = Path(__file__).resolve().parents[1]


class AgentFleet:
    """Several simulated node agents, each with its Framer and Kafka Sender."""

    def __init__(self, bootstrap: str, tmp: Path, agents: int = 3, gpus: int = 2, interval: float = 0.25) -> None:
        self.sent: set[tuple[str, float]] = set()
        self.processes = 0
        self._lock = threading.Lock()
        self.parts: list[tuple[Agent, Framer, Sender]] = []
        config = ScheduleConfig(floor=interval, ceiling=interval, busy=interval, cpu_budget=1.0)
        for i in range(agents):
            fleet = SimulatedFleet(gpus, seed=100 + i)
            sender = Sender(KafkaSettings(bootstrap_servers=bootstrap, linger_ms=5), tmp / f"spool-{i}",
                            spool_after_ms=500)
            instance = new_instance_id()
            framer = Framer(sender.submit, node=f"node-{i}", instance=instance, window=4, max_delay_s=0.5)
            agent = Agent(fleet, f"node-{i}", config, SimulatedAttribution(fleet), calibrate_calls=False,
                          instance=instance, record_sinks=(self._count, framer.add), event_sinks=(framer.add_event,))
            self.parts.append((agent, framer, sender))

    def _count(self, record: GpuRecord) -> None:
        with self._lock:
            self.sent.add((record.gpu, round(record.ts, 6)))
            self.processes += len(record.processes)

    def start(self) -> None:
        for agent, framer, sender in self.parts:
            sender.start()
            agent.open()
            framer.start()
            agent.start()

    def stop(self) -> None:
        for agent, framer, _ in self.parts:
            agent.stop()
            framer.stop()
        for _, _, sender in self.parts:
            assert sender.flush(60), "the sender could not deliver everything within 60 s"
            sender.stop(10)

    def stats(self) -> list[dict[str, Any]]:
        return [sender.stats() for _, _, sender in self.parts]


class Collector:
    """`gpuwatch collector` as a real subprocess (so it can be SIGKILLed)."""

    def __init__(self, dsn: str, bootstrap: str, log: Path) -> None:
        self.args = [sys.executable, "-m", "gpuwatch", "collector", "--db", dsn, "--kafka-bootstrap", bootstrap,
                     "--log-level", "INFO"]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def _stored(dsn: str) -> tuple[set[tuple[str, float]], int, int, int]:
    async def run() -> tuple[set[tuple[str, float]], int, int, int]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT gpu, extract(epoch FROM ts)::float8 AS t FROM gpu_samples")
            total = await conn.fetchval("SELECT count(*) FROM gpu_samples")
            procs = await conn.fetchval("SELECT count(*) FROM process_samples")
            distinct = await conn.fetchval("SELECT count(*) FROM (SELECT DISTINCT gpu, ts FROM gpu_samples) s")
        finally:
            await conn.close()
        return {(r["gpu"], round(r["t"], 6)) for r in rows}, total, distinct, procs

    return asyncio.run(run())


def _wait_for_all(fleet: AgentFleet, dsn: str, collector: Collector, timeout: float = 90.0) -> None:
    last: list[Any] = [set()]

    def all_stored() -> bool:
        try:
            last[:] = _stored(dsn)
        except asyncpg.UndefinedTableError:  # a collector killed early has not created its tables yet
            return False
        return bool(last[0] >= fleet.sent)

    def missing() -> str:
        gone = fleet.sent - last[0]
        return (f"{len(gone)} of {len(fleet.sent)} samples never stored, e.g. {sorted(gone)[:5]}\n"
                f"collector log:\n{collector.log_tail()}\nsenders: {fleet.stats()}")

    wait_until(all_stored, timeout=timeout, interval=0.5, what="every sample sent to be stored", details=missing)
    stored, total, distinct, procs = last
    assert stored == fleet.sent, f"{len(stored - fleet.sent)} rows nobody sent"
    assert total == distinct == len(fleet.sent), "duplicated rows"
    assert procs == fleet.processes, f"process rows {procs} != process samples sent {fleet.processes}"


@pytest.fixture
def pipeline(kafka_broker: Any, pg_db: str, tmp_path: Path) -> Iterator[tuple[Any, str, Collector, AgentFleet]]:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=3)
    create_topic(broker.bootstrap, f"{TOPIC}.dlq", partitions=1)
    collector = Collector(pg_db, broker.bootstrap, tmp_path / "collector.log")
    fleet = AgentFleet(broker.bootstrap, tmp_path)
    collector.start()
    try:
        yield broker, pg_db, collector, fleet
    finally:
        collector.stop()


def test_normal_flow_loses_and_duplicates_nothing(pipeline: tuple[Any, str, Collector, AgentFleet]) -> None:
    _broker, dsn, collector, fleet = pipeline
    fleet.start()
    time.sleep(6)
    fleet.stop()
    _wait_for_all(fleet, dsn, collector)
    assert len(fleet.sent) >= 100


def test_broker_down_30s_agents_spool_and_replay(pipeline: tuple[Any, str, Collector, AgentFleet]) -> None:
    broker, dsn, collector, fleet = pipeline
    fleet.start()
    time.sleep(3)
    broker.stop()
    time.sleep(30)
    broker.start()
    time.sleep(3)
    try:
        fleet.stop()
    except AssertionError as e:
        raise AssertionError(f"{e}\nbroker running: {broker.running}\n{broker.log_tail()}") from None
    _wait_for_all(fleet, dsn, collector, timeout=120)
    assert sum(s["spooled_total"] for s in fleet.stats()) > 0, "the outage should have gone through the spool"


def test_collector_sigkilled_mid_batch_and_restarted(pipeline: tuple[Any, str, Collector, AgentFleet]) -> None:
    _broker, dsn, collector, fleet = pipeline
    fleet.start()
    for _ in range(3):
        time.sleep(2)
        collector.kill()
        time.sleep(1)
        collector.start()
    time.sleep(2)
    fleet.stop()
    _wait_for_all(fleet, dsn, collector)


def test_postgresql_restarted(pipeline: tuple[Any, str, Collector, AgentFleet], pg_server: Any) -> None:
    _broker, dsn, collector, fleet = pipeline
    fleet.start()
    time.sleep(3)
    pg_server.stop("fast")
    time.sleep(5)
    pg_server.start()
    time.sleep(3)
    fleet.stop()
    _wait_for_all(fleet, dsn, collector)


def test_garbage_and_truncated_frames_go_to_the_dlq(pipeline: tuple[Any, str, Collector, AgentFleet]) -> None:
    from aiokafka import AIOKafkaProducer

    broker, dsn, collector, fleet = pipeline
    captured: list[bytes] = []
    first_sender = fleet.parts[0][2]
    original = first_sender.submit

    def tap(msg: Any) -> None:
        if len(captured) < 3 and dict(msg.headers).get("type") == b"frame":
            captured.append(msg.value)
        original(msg)

    fleet.parts[0][1].submit = tap
    fleet.start()
    time.sleep(2)

    async def inject() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        bad = [b"", b"garbage", os.urandom(200), *(frame[: len(frame) // 2] for frame in captured)]
        for i, value in enumerate(bad):
            await producer.send_and_wait(TOPIC, value, key=f"GPU-bad-{i}".encode(), headers=[("type", b"frame")])
        await producer.send_and_wait(TOPIC, b"{not json", key=b"GPU-bad-event", headers=[("type", b"event")])
        await producer.stop()
        return len(bad) + 1

    injected = asyncio.run(inject())
    time.sleep(2)
    fleet.stop()
    _wait_for_all(fleet, dsn, collector)
    dead = consume_all(broker.bootstrap, f"{TOPIC}.dlq", injected, timeout=30)
    assert len(dead) == injected
    for message in dead:
        reason = dict(message.headers)["dlq_reason"].decode()
        assert reason.startswith(("undecodable frame", "bad event")), reason
