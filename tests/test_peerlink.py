"""Two collector replicas tell each other of their serving GPUs through ``<topic>.peers``, on a
real Kafka-protocol broker (tansu): each one's GPUs become the other's peers; a replica that
starts late reads back what was said before it; an unreadable message is counted and skipped."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer

from collector.detect import DetectionEngine
from collector.peerlink import PeerLink, peers_topic
from tests.detect.helpers import record
from tests.fixtures_kafka import create_topic
from tests.support.poll import await_until

TOPIC = "gpu.telemetry"


def _engine(node: str, gpu: int, seconds: int = 40) -> DetectionEngine:
    engine = DetectionEngine()
    for t in range(seconds):
        engine.feed(record(float(t), gpu, sm=0.4, pid=200 + gpu, pod=f"serve-{gpu}", service="chat", node=node,
                           reasons=0, clock=1980.0))
    return engine


def test_replicas_see_each_others_serving_gpus(kafka_broker: Any) -> None:
    broker = kafka_broker()

    create_topic(broker.bootstrap, peers_topic(TOPIC), partitions=1)

    async def scenario() -> None:
        a, b, late = _engine("n0", 0), _engine("n1", 1), _engine("n2", 2)
        links = [PeerLink(broker.bootstrap, TOPIC, e, every_s=0.3, replica=name)
                 for e, name in ((a, "a"), (b, "b"))]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(link.run(stop)) for link in links]
        try:
            await await_until(lambda: ("GPU-n1-1" in a.remote.shadows and "GPU-n0-0" in b.remote.shadows) or None,
                              timeout=60.0, what="each replica's GPU a shadow in the other", interval=0.2)
            assert set(a.services.members["ns/chat"]) == {"GPU-n0-0", "GPU-n1-1"}
            # garbage on the topic: counted, skipped, the next summaries still taken
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
            await producer.start()
            try:
                await producer.send_and_wait(peers_topic(TOPIC), b'{"v": 1, "replica": "x", "gpus": [[1]]}')
            finally:
                await producer.stop()
            await await_until(lambda: links[0].counters["unreadable"] >= 1 or None, timeout=30.0,
                              what="the bad message counted")
            taken = links[0].counters["absorbed"]
            await await_until(lambda: links[0].counters["absorbed"] > taken or None, timeout=30.0,
                              what="summaries still taken after it")
            # a replica that starts now reads back what the others said before it
            late_link = PeerLink(broker.bootstrap, TOPIC, late, every_s=60.0, replica="late")
            tasks.append(asyncio.create_task(late_link.run(stop)))
            links.append(late_link)
            await await_until(lambda: {"GPU-n0-0", "GPU-n1-1"} <= set(late.remote.shadows) or None, timeout=60.0,
                              what="the late replica's shadows")
            text = "\n".join(m.name for link in links for fam in [link.families()] for m in fam)
            assert "gpuwatch_collector_peer_messages_unreadable" in text
        finally:
            stop.set()
            for link in links:
                await link.shutdown(10.0)
            await asyncio.gather(*tasks, return_exceptions=True)
        assert all(t.exception() is None for t in tasks if t.done() and not t.cancelled())

    asyncio.run(scenario())
