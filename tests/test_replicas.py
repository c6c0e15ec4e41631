"""Three collector replicas on twelve partitions find what one finds (issue 16, item 1).

Why: a collector replica reads whole partitions, and its detectors compare a GPU with the
other GPUs of its pod (a straggler, a pod-wide fall). Keyed by GPU, a pod's GPUs were spread
over partitions and so over replicas: on this fleet, replayed with the records split as
twelve GPU-keyed partitions over three replicas would split them, two stragglers were lost
and nine false drops appeared. The agent now keys by node (``telemetry.wire.partition_key``),
so a pod's GPUs, which share a node, reach one replica.

Here, on a real Kafka-protocol broker (tansu) and the session's PostgreSQL: the generated
fleet's frames (4 nodes of 8 GPUs, 45 minutes with stragglers, throttles, XIDs, ECC, lost
GPUs, leaks and launch-bound phases among the incidents), framed by the agent's own
:class:`~agent.framing.Framer` (two records a frame, as at 1 Hz with the 1 s maximum delay),
go to a topic of twelve partitions; three ``CollectorStack`` replicas of one consumer group,
each with its four partitions, store and judge them, and so does one replica of another group
on another database. The three replicas tell each other of their serving GPUs through the
peers topic (``collector.peerlink``). The anomalies (kind, GPU, start within 1 s) are the same,
the training pods' pod-wide falls among them, but for the serving replicas' ``throughput_drop``:
a serving replica's step is judged against its service's other
replicas, which live on other nodes and so may be another collector's; their summaries come
every 0.5 s of wall time while this replay runs at about a hundred times real time, so they
arrive minutes of record time late or early. That the exchange gives one engine's answers is
shown in record time by ``tests/detect/test_remote.py`` (docs/architecture.md, "Partitions and
replicas").
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from collector import deadletter
from collector.consumer import KafkaSource
from collector.ingest import Inbound, Ingestor
from collector.peerlink import PeerLink
from collector.replies import KafkaReplies
from collector.settings import ConsumerTuning
from collector.store import Store, positions
from gpuwatch.collector_stack import CollectorOptions, CollectorStack
from telemetry.wire import Message
from tests.fixtures_kafka import create_topic
from tests.support.fleet_frames import fleet_messages
from tests.support.incidents.generate import Fleet
from tests.support.poll import await_until

TOPIC = "gpu.telemetry"
PARTITIONS, REPLICAS = 12, 3
SEED, NODES, HOURS = 23, 4, 0.75
TUNING = ConsumerTuning(lag_interval_s=1.0)


def _serving_gpus() -> set[str]:
    """The GPUs of the fleet's serving replicas (demand-driven: judged against their service's other
    replicas, which may live on another collector replica)."""
    return {g.uuid for g in Fleet(nodes=NODES, hours=HOURS, seed=SEED).gpus if g.role in ("chat", "serve")}


def _fleet_messages() -> tuple[list[Message], int]:
    """The fleet's records as its agents would send them: one framer per node, in time order."""
    return fleet_messages(NODES, HOURS, SEED)


async def _produce(bootstrap: str, messages: list[Message], topic: str = TOPIC) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        sent = [await producer.send(topic, m.value, key=m.key, headers=list(m.headers)) for m in messages]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def _stack(store: Store, bootstrap: str, group: str, rules: str | None = None) -> CollectorStack:
    async def record(topic: str, msg: Inbound, reason: str, why: str) -> None:
        await deadletter.record(store.pool, topic, msg.partition, msg.offset, msg.key, msg.value, msg.headers,
                                reason, why)

    replies = KafkaReplies(bootstrap, TOPIC, record_dead_letter=record, tuning=TUNING)

    def source_for(ingestor: Ingestor) -> KafkaSource:
        return KafkaSource(ingestor, replies, bootstrap, TOPIC, group,
                           load_positions=lambda t: positions.load(store.pool, t),
                           save_positions=lambda t, o: positions.save(store.pool, t, o), tuning=TUNING)

    return CollectorStack(store, source_for, replies, CollectorOptions(maintenance_s=3600.0, alert_rules=rules))


async def _anomalies(dsn: str) -> list[tuple[str, str, float]]:
    store = await Store.open(dsn)
    try:
        async with store.pool.acquire() as conn:
            rows = await conn.fetch("SELECT kind, gpu, extract(epoch FROM start_ts)::float8 AS start FROM anomalies "
                                    "ORDER BY kind, gpu, start_ts")
    finally:
        await store.close()
    return [(r["kind"], r["gpu"], float(r["start"])) for r in rows]


async def _run(dsn: str, bootstrap: str, group: str, replicas: int, total: int,
               before_reading: Callable[[], Awaitable[None]] | None = None,
               rules: str | None = None) -> dict[str, int]:
    """Start ``replicas`` stacks of ``group``; once each holds its share of the partitions, run
    ``before_reading`` (the produce), wait for every record to be stored and judged, stop them."""
    stores = [await Store.open(dsn) for _ in range(replicas)]
    stacks = [_stack(s, bootstrap, group, rules) for s in stores]
    try:
        await asyncio.gather(*(s.start() for s in stacks))
        links = [PeerLink(bootstrap, TOPIC, s.detection.engine, every_s=0.5, replica=f"{group}-{i}")
                 for i, s in enumerate(stacks)] if replicas > 1 else []
        for s, link in zip(stacks, links, strict=False):
            s.add_task(link.run(s.stop), "the peers link", link.shutdown)
        share = PARTITIONS // replicas

        def balanced() -> bool | None:
            return all(len(s.source.assignment()) == share for s in stacks) or None  # type: ignore[attr-defined]

        await await_until(balanced, timeout=90.0, what=f"{replicas} replicas with {share} partitions each",
                          interval=0.2)
        if before_reading is not None:
            await before_reading()

        def stored() -> bool | None:
            return sum(s.ingestor.counters["records"] for s in stacks) >= total or None

        await await_until(stored, timeout=240.0, what=f"{total} records stored", interval=0.5,
                          details=lambda: [dict(s.ingestor.counters) for s in stacks])
        if links:  # summaries go out every 0.5 s of wall time: a fast replay may end before each replica read one
            await await_until(lambda: all(link.counters["absorbed"] for link in links) or None, timeout=30.0,
                              what="every replica absorbed the others' summaries", interval=0.2,
                              details=lambda: [dict(link.counters) for link in links])
        for s in stacks:
            await s.detection.flush()
        return {"absorbed": min((link.counters["absorbed"] for link in links), default=0),
                "records": sum(s.ingestor.counters["records"] for s in stacks),
                "dead": sum(s.ingestor.counters.get("dead_lettered", 0) for s in stacks),
                "busy": sum(1 for s in stacks if s.ingestor.counters["records"] > 0)}
    finally:
        for s in stacks:
            await s.shutdown(20.0)


def test_three_replicas_on_twelve_partitions_find_what_one_finds(kafka_broker: Any, pg_db: str,
                                                                  pg_server: Any) -> None:
    broker = kafka_broker()
    create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
    create_topic(broker.bootstrap, f"{TOPIC}.dlq", partitions=1)
    create_topic(broker.bootstrap, f"{TOPIC}.peers", partitions=1)
    messages, total = _fleet_messages()
    other = f"r{os.getpid()}_{int(time.time() * 1000) % 100000}"
    pg_server.execute(f'CREATE DATABASE "{other}" TEMPLATE template0 STRATEGY FILE_COPY')
    try:
        # three replicas first, balanced before a frame is sent (a rebalance mid-run would move
        # detector state: item 2 of the issue); then one replica of another group reads the same log
        three = asyncio.run(_run(pg_db, broker.bootstrap, "three", REPLICAS, total,
                                 lambda: _produce(broker.bootstrap, messages)))
        one = asyncio.run(_run(pg_server.dsn(other), broker.bootstrap, "one", 1, total))
        by_three, by_one = asyncio.run(_anomalies(pg_db)), asyncio.run(_anomalies(pg_server.dsn(other)))
    finally:
        pg_server.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')
    assert three["records"] == one["records"] == total and three["dead"] == one["dead"] == 0
    assert three["busy"] == REPLICAS  # each replica held some of the fleet's nodes
    assert three["absorbed"] > 0  # each replica took the others' serving GPUs as peers (collector/peerlink.py)

    serving = _serving_gpus()

    def pod_level(anomalies: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
        return [a for a in anomalies if a[0] != "throughput_drop" or a[1] not in serving]

    a, b = pod_level(by_one), pod_level(by_three)
    assert sum(1 for k, _, _ in a if k == "straggler") >= 2
    assert sum(1 for k, _, _ in a if k == "throughput_drop") >= 4  # pod-wide falls of training pods
    assert [(k, g) for k, g, _ in a] == [(k, g) for k, g, _ in b], (a, b)
    assert all(abs(x[2] - y[2]) <= 1.0 for x, y in zip(a, b, strict=True))
