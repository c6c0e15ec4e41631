"""Collector replicas tell each other of their serving GPUs, through the ``<topic>.peers`` topic.

Why a topic: a serving replica's step is judged against its service's other replicas, which
run on other nodes and so are read by other collector replicas (``collector.detect.remote``
says what is exchanged and why). Every replica publishes its summaries every ``every_s``
seconds and reads every other replica's, from ``lookback_s`` back when it starts (what the
step anchor needs: the last two and a half minutes of a peer's blocks). A consumer outside
any group reads every partition: each replica needs all of it. One partition is plenty (a
replica publishes a message every few seconds); a short retention (an hour) keeps it small.

What a replica does without it (topic missing, broker away, ``--no-peer-exchange``): it
judges each service with the replicas on its own partitions, as before this link; that is
logged once and counted, and nothing else waits for it. A message that cannot be read is
counted and skipped with a one-line reason naming the field; nothing is lost (the summaries
are state, repeated every few seconds, not data).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client.core import CounterMetricFamily

from collector.detect.engine import DetectionEngine
from collector.detect.remote import BadSummary, decode, encode
from collector.kafkastart import retry_start
from telemetry.ratelimit import RateLimitedLog

log = logging.getLogger("collector.peers")


def peers_topic(topic: str) -> str:
    """The collectors' own topic beside a telemetry topic."""
    return f"{topic}.peers"


class PeerLink:
    """Publishes ``engine``'s summaries and feeds it the other replicas'; run :meth:`run` in the
    event loop that feeds the engine (it is not thread-safe, and this never leaves the loop)."""

    def __init__(self, bootstrap: str, topic: str, engine: DetectionEngine, *, every_s: float = 5.0,
                 lookback_s: float = 300.0, replica: str | None = None,
                 client_kwargs: Mapping[str, Any] | None = None) -> None:
        self.bootstrap, self.topic, self.engine = bootstrap, peers_topic(topic), engine
        self.every_s, self.lookback_s = every_s, lookback_s
        self.replica = replica or f"{socket.gethostname()}-{os.getpid()}"
        self.counters: Counter[str] = Counter()
        self._kw = dict(client_kwargs or {})
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._limited = RateLimitedLog(log)

    async def run(self, stop: asyncio.Event) -> None:
        """Connect (waiting while the broker is away), then publish and read until ``stop``."""
        producer = self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks=1, **self._kw)
        consumer = self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                                     enable_auto_commit=False, auto_offset_reset="latest",
                                                     **self._kw)
        stopping = self._stopping
        try:
            await retry_start(producer.start, "the peers producer", self.bootstrap, stopping, self._limited)
            await retry_start(consumer.start, "the peers consumer", self.bootstrap, stopping, self._limited)
        except KafkaError:
            return  # stopped while it waited
        tasks = [asyncio.create_task(self._publish(stop)), asyncio.create_task(self._read(stop))]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def shutdown(self, timeout: float) -> None:
        self._stopping.set()
        for client in (self._consumer, self._producer):
            if client is not None:
                try:
                    await asyncio.wait_for(client.stop(), timeout)
                except (KafkaError, TimeoutError) as exc:
                    log.warning("stopping the peers client: %s", exc)

    # ---- out ----
    async def _publish(self, stop: asyncio.Event) -> None:
        assert self._producer is not None
        while not stop.is_set():
            summaries = self.engine.summaries()
            if summaries:
                try:
                    await asyncio.wait_for(self._producer.send_and_wait(
                        self.topic, encode(self.replica, summaries), key=self.replica.encode()), 10.0)
                    self.counters["published"] += len(summaries)
                    self._limited.resolved("publish", "service peers published to %s again", self.topic)
                except (KafkaError, TimeoutError) as exc:
                    self.counters["publish_errors"] += 1
                    self._limited.warning("publish", "service peers not published to %s (%s: %s); other replicas "
                                          "judge this one's services with their own replicas only", self.topic,
                                          type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.every_s)

    # ---- in ----
    async def _assign(self) -> bool:
        """Every partition of the topic, from ``lookback_s`` back; False while it does not exist."""
        consumer = self._consumer
        assert consumer is not None
        parts = await consumer._client.fetch_all_metadata()
        numbers = parts.partitions_for_topic(self.topic)
        if not numbers:
            return False
        tps = [TopicPartition(self.topic, p) for p in sorted(numbers)]
        consumer.assign(tps)
        since = await consumer.offsets_for_times({tp: int((time.time() - self.lookback_s) * 1000) for tp in tps})
        for tp in tps:
            at = since.get(tp)
            if at is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, at.offset)
        return True

    async def _read(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not stop.is_set():
            try:
                if not consumer.assignment() and not await self._assign():
                    self._limited.warning("topic", "topic %s does not exist (create it: docs/deploy.md); service "
                                          "replicas on other collectors are not compared here", self.topic)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 10.0)
                    continue
                self._limited.resolved("topic", "reading topic %s", self.topic)
                batches = await consumer.getmany(timeout_ms=1000, max_records=500)
            except KafkaError as exc:
                self.counters["read_errors"] += 1
                self._limited.warning("read", "reading %s: %s: %s; retrying", self.topic, type(exc).__name__, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 5.0)
                continue
            for messages in batches.values():
                for msg in messages:
                    self._take(msg.value, f"{msg.topic}/{msg.partition}/{msg.offset}")

    def _take(self, value: bytes | None, where: str) -> None:
        try:
            replica, summaries = decode(value or b"", self.engine.remote.wanted())
        except BadSummary as exc:
            self.counters["unreadable"] += 1
            self._limited.warning("bad", "skipped peers message %s: %s", where, exc)
            return
        if replica == self.replica:
            return
        self.counters["absorbed"] += self.engine.absorb(summaries)

    # ---- /metrics ----
    def families(self) -> Iterator[CounterMetricFamily]:
        for key, name, doc in (
            ("published", "gpuwatch_collector_peer_summaries_published",
             "summaries of this replica's serving GPUs published to the peers topic"),
            ("absorbed", "gpuwatch_collector_peer_summaries_absorbed",
             "other replicas' serving GPUs' summaries taken as peers here"),
            ("unreadable", "gpuwatch_collector_peer_messages_unreadable", "peers messages skipped: not readable"),
            ("publish_errors", "gpuwatch_collector_peer_publish_errors", "peers messages the topic did not take"),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(self.counters.get(key, 0)))
            yield c
