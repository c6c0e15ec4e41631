"""The collector's way back to the agents over Kafka: dead letters, keyframe and profile requests.

One producer carries both. A dead letter goes to the dead-letter topic, cut to fit the
producer's request limit (:mod:`collector.deadletter`), or, when even that is not taken,
into the database (``record_dead_letter``). A keyframe request goes to the control topic,
keyed by node, in the background (a control topic that does not exist costs a metadata
wait, which must not hold up ingest); so does a profile request (:mod:`collector.profiling`).
Built before the :class:`~collector.ingest.Ingestor`, which is given
:meth:`KafkaReplies.dead_letter` and :meth:`KafkaReplies.request_keyframe`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from prometheus_client.core import CounterMetricFamily

from collector import deadletter
from collector.ingest import Inbound
from collector.kafkastart import retry_start
from collector.settings import ConsumerTuning
from telemetry.control import (
    CONTROL_HEADERS,
    DEFAULT_TOPIC,
    PROFILE_REQUEST_HEADERS,
    KeyframeRequest,
    ProfileRequest,
    control_topic,
    dlq_topic,
)
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Headers

log = logging.getLogger("collector.consumer")

# (topic, message, reason, why Kafka did not take it) -> None; stores the dead letter elsewhere
RecordDeadLetter = Callable[[str, Inbound, str, str], Awaitable[None]]

_MAX_PENDING_REQUESTS = 1000


class KafkaReplies:
    """Dead letters of ``topic`` and keyframe requests to its agents, through one producer."""

    def __init__(self, bootstrap: str, topic: str = DEFAULT_TOPIC, dlq: str | None = None,
                 record_dead_letter: RecordDeadLetter | None = None,
                 client_kwargs: Mapping[str, Any] | None = None, tuning: ConsumerTuning | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.dlq_topic = dlq or dlq_topic(topic)
        self.control_topic = control_topic(topic)
        self.record_dead_letter = record_dead_letter
        self.tuning = tuning or ConsumerTuning()
        self.counters: Counter[str] = Counter()
        self._kw = dict(client_kwargs or {})
        self._producer: AIOKafkaProducer | None = None
        self._stopping = asyncio.Event()
        self._limited = RateLimitedLog(log)
        self._requests: set[asyncio.Task[None]] = set()  # keyframe requests being sent

    async def start(self) -> None:
        """Connect the producer; waits (retrying) while the broker is away."""
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                          max_request_size=self.tuning.dlq_max_request_size, **self._kw)
        await retry_start(self._producer.start, "the dead-letter producer", self.bootstrap, self._stopping,
                          self._limited)

    async def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the keyframe requests under way."""
        if not self._requests:
            return True
        _done, pending = await asyncio.wait(set(self._requests), timeout=timeout)
        return not pending

    async def shutdown(self, timeout: float) -> None:
        self._stopping.set()
        for task in list(self._requests):
            task.cancel()
        if self._producer is not None:
            try:
                await asyncio.wait_for(self._producer.stop(), timeout)
            except (KafkaError, TimeoutError) as exc:
                log.warning("stopping the Kafka client: %s", exc)

    # ---- dead letters ----
    async def dead_letter(self, msg: Inbound, reason: str) -> None:
        assert self._producer is not None
        source = f"{self.topic}/{msg.partition}/{msg.offset}"
        out = deadletter.fit(msg.key, msg.value, msg.headers, reason, source, self.tuning.dlq_max_request_size)
        try:
            await asyncio.wait_for(
                self._producer.send_and_wait(self.dlq_topic, out.value, key=out.key, headers=out.headers),
                self.tuning.dlq_timeout_s)
        except (KafkaError, TimeoutError) as exc:
            await self.dead_letter_elsewhere(msg, reason, f"{type(exc).__name__}: {exc}")
            return
        if out.truncated:
            self.counters["dead_letters_truncated"] += 1
        kind = reason.split(":", 1)[0]
        self._limited.warning(f"dlq:{kind}", "dead-lettered %s (%d bytes%s): %s", source, len(msg.value),
                              ", cut to fit" if out.truncated else "", reason)

    async def dead_letter_elsewhere(self, msg: Inbound, reason: str, why_not_kafka: str) -> None:
        """The dead-letter topic did not take it: the database keeps it (retried while it is away)."""
        if self.record_dead_letter is None:
            raise RuntimeError(f"dead letter of {self.topic}/{msg.partition}/{msg.offset} not produced "
                               f"({why_not_kafka}) and there is no database to record it in")
        await self.record_dead_letter(self.topic, msg, reason, why_not_kafka)
        self.counters["dead_letters_in_db"] += 1
        self._limited.warning("dlq-db", "dead letter of %s/%d/%d recorded in the database (Kafka: %s): %s",
                              self.topic, msg.partition, msg.offset, why_not_kafka, reason)

    # ---- keyframe requests ----
    async def request_keyframe(self, request: KeyframeRequest) -> None:
        """Produce ``request`` to the control topic, in the background; the agent of its node
        makes its next frame a keyframe."""
        self._control(request.encode(), request.key(), CONTROL_HEADERS)

    async def request_profile(self, request: ProfileRequest) -> None:
        """Produce ``request`` to the control topic, in the background; the agent of its node profiles
        the GPU's processes (if profiling is on there) and answers on the telemetry topic."""
        self._control(request.encode(), request.key(), PROFILE_REQUEST_HEADERS)

    def _control(self, value: bytes, key: bytes, headers: Headers) -> None:
        if len(self._requests) >= _MAX_PENDING_REQUESTS:
            self._request_failed(RuntimeError(f"{len(self._requests)} control requests still being sent"))
            return
        task = asyncio.create_task(self._send_request(value, key, headers))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _send_request(self, value: bytes, key: bytes, headers: Headers) -> None:
        assert self._producer is not None
        try:
            future = await self._producer.send(self.control_topic, value, key=key, headers=list(headers))
        except KafkaError as exc:
            self._request_failed(exc)
            return
        future.add_done_callback(self._request_sent)

    def _request_sent(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._request_failed(exc)

    def _request_failed(self, exc: BaseException) -> None:
        self.counters["keyframe_request_errors"] += 1
        self._limited.warning("kfreq-send", "control request (keyframe or profile) not delivered to %s: %s: %s",
                              self.control_topic, type(exc).__name__, exc)

    # ---- /metrics ----
    def families(self) -> Iterator[Any]:
        for key, name, doc in (
            ("dead_letters_in_db", "gpuwatch_collector_dead_letters_in_database",
             "dead letters the dead-letter topic did not take, recorded in the database"),
            ("dead_letters_truncated", "gpuwatch_collector_dead_letters_truncated",
             "dead letters cut to fit the dead-letter producer's request limit"),
            ("keyframe_request_errors", "gpuwatch_collector_keyframe_request_errors",
             "keyframe and profile requests not delivered to the control topic"),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(self.counters.get(key, 0)))
            yield c
