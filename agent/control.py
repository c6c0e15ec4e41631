"""The agent's end of the control channel: keyframe and profile requests from the collector.

Frames are deltas, so a collector that lost a stream's base (a broker that came back
empty, a dead-lettered frame) cannot decode that GPU until its next scheduled keyframe,
minutes away for an idle GPU. It asks instead, with a :class:`telemetry.control.KeyframeRequest`
on ``<telemetry topic>.control``. This listener reads that topic from its end (a request
older than this process is not for it), keeps the requests for its node and instance,
and hands each to ``on_request(gpu)`` (``None``: every GPU), which the agent wires to
:meth:`agent.framing.Framer.request_keyframe`. A :class:`telemetry.control.ProfileRequest`
for this agent goes to ``on_profile`` (:meth:`agent.profiling.Profiler.request`), which
queues it and returns at once.

A malformed control message is counted and skipped with one log line (rate-limited);
nothing in it can stop the listener. The listener runs on a thread of its own, counted
in the agent's ``transport`` CPU account, and reconnects with backoff while Kafka is away.
In ``gpuwatch up`` there is no topic: the collector calls the framer in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from agent.cpuclock import TRANSPORT, ThreadCpu
from agent.kafka_settings import KafkaSettings
from agent.stats import counter, gauge, snapshot
from telemetry.control import ControlError, ProfileRequest, control_topic, decode_control
from telemetry.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

OnRequest = Callable[[str | None], None]
OnProfile = Callable[[ProfileRequest], None]
BACKOFF_S = (0.5, 30.0)


@snapshot
class ControlStats:
    messages_total: int = counter("gpuwatch_agent_control_messages", "Messages read from the control topic.")
    requests_total: int = counter(
        "gpuwatch_agent_control_keyframe_requests", "Keyframe requests for this agent (its node and instance).")
    malformed_total: int = counter(
        "gpuwatch_agent_control_malformed", "Control messages that could not be read: counted and skipped.")
    connected: int = gauge("gpuwatch_agent_control_connected", "1 while the control topic is being read.")


class ControlListener:
    """Reads keyframe requests for ``node``/``instance`` from the control topic of ``settings.topic``."""

    def __init__(
        self,
        settings: KafkaSettings,
        node: str,
        instance: str,
        on_request: OnRequest,
        *,
        on_profile: OnProfile | None = None,
        cpu: ThreadCpu | None = None,
    ) -> None:
        self.settings = settings
        self.topic = control_topic(settings.topic)
        self.node = node
        self.instance = instance
        self.on_request = on_request
        self.on_profile = on_profile
        self.cpu = cpu or ThreadCpu()
        self._errors = RateLimitedLog(log)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self.messages_total = 0
        self.requests_total = 0
        self.malformed_total = 0
        self.connected = False

    def stats(self) -> ControlStats:
        return ControlStats(messages_total=self.messages_total, requests_total=self.requests_total,
                            malformed_total=self.malformed_total, connected=int(self.connected))

    def handle(self, value: bytes | None, where: str) -> None:
        """Act on one control message (``where`` names it in a log line)."""
        self.messages_total += 1
        try:
            request = decode_control(value or b"")
        except ControlError as exc:
            self.malformed_total += 1
            self._errors.warning("malformed", "control message %s skipped: %s", where, exc)
            return
        if isinstance(request, ProfileRequest):
            if self.on_profile is not None and request.matches(self.node, self.instance):
                self.on_profile(request)
            return
        if request.matches(self.node, self.instance):
            self.requests_total += 1
            log.info("keyframe requested for %s by the collector: %s", request.gpu or "every GPU", request.reason)
            self.on_request(request.gpu)

    # ---- the thread ----
    def start(self) -> None:
        self._thread = self.cpu.spawn(TRANSPORT, self._run, "gpuwatch-control")
        self._thread.start()
        self._ready.wait(5.0)

    def stop(self, timeout: float = 5.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._ready.set()
        backoff = BACKOFF_S[0]
        while not stop.is_set():
            consumer: AIOKafkaConsumer | None = None
            try:
                consumer = AIOKafkaConsumer(**self.settings.consumer_config())
                await consumer.start()
                consumer.subscribe([self.topic])
                self.connected = True
                self._errors.resolved("connect", "reading keyframe requests from %s again", self.topic)
                backoff = BACKOFF_S[0]
                while not stop.is_set():
                    batches = await consumer.getmany(timeout_ms=500)
                    for tp, records in batches.items():
                        for r in records:
                            self.handle(r.value, f"{tp.topic}[{tp.partition}]@{r.offset}")
            except (KafkaError, OSError, ValueError, TypeError) as exc:  # ValueError/TypeError: bad client config
                self._errors.warning("connect", "control topic %s unreadable (%s); retrying in %.1f s",
                                     self.topic, str(exc) or type(exc).__name__, backoff)
            finally:
                self.connected = False
                if consumer is not None:
                    with contextlib.suppress(KafkaError, OSError):
                        await consumer.stop()
            if not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(BACKOFF_S[1], backoff * 2)
