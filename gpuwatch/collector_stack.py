"""The collector's stack: store, detection, ingest, the consume loop, its background work and the API.

Why one place: ``gpuwatch collector`` reads Kafka (a consumer-group member, dead letters and
keyframe requests back through Kafka) and ``gpuwatch up`` reads the in-process transport
(its replies call the agent's framer and profiler in the same process). What they run on
top is the same collector, so it is built here once, from the store, the source and the
replies the command chose: the detection service, the ingestor that feeds it, the one
consume loop (:class:`~collector.loop.ConsumeLoop`), maintenance (rollups, retention), the
service usage rollup and the detection service's own loop, and optionally the REST API.

:meth:`shutdown` stops them last-started first under one deadline: the source (which
hands over what must still be stored), the loop once it has drained that, the background
tasks, the replies, the API, detection, the store. So nothing fetched is lost on a clean
stop, and a dead Kafka or database never leaves a part running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from collector.ingest import Ingestor
from collector.settings import ConsumerTuning
from collector.source import Replies, Source
from gpuwatch.lifecycle import Lifecycle, Parts

log = logging.getLogger("gpuwatch.collector")
SHUTDOWN_S = 20.0  # one deadline for every stop: the consumer's and the producer's 10 s each
USAGE_EVERY_S = 60.0  # the service usage rollup (GET /services/{name}/history) is refreshed this often


class CollectorReplies(Replies, Protocol):
    """The replies a collector needs: the source's, and profile requests to the agents."""

    async def request_profile(self, request: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """What the command's settings say about the collector on top of its transport."""

    detect: bool = True  # False: store only (``--no-detect``)
    alert_rules: str | None = None  # rules YAML (None: detect and store anomalies, send nothing)
    maintenance_s: float = 60.0
    checkpoint_s: float = 300.0  # detector state of every node fed, saved this often (collector/alerting/service.py)
    keyframe_request_interval_s: float = ConsumerTuning.keyframe_request_interval_s
    stream_idle_s: float = ConsumerTuning.stream_idle_s


class CollectorStack:
    """The collector on one store, one source and its replies; nothing runs until :meth:`start`."""

    def __init__(self, store: Any, source_for: Callable[[Ingestor], Source], replies: CollectorReplies,
                 options: CollectorOptions = CollectorOptions(), stop: asyncio.Event | None = None) -> None:
        """``source_for`` makes the source for the ingestor (Kafka's consumer hands it rebalances)."""
        from collector.alerting.service import from_rules_file
        from collector.profiling import ProfileRequests, ProfileStore
        from collector.store import validate, validate_event
        from collector.store.kernels import KernelStore

        self.store, self.replies, self.options = store, replies, options
        self.detection = from_rules_file(store.pool, options.alert_rules,
                                         on_opened=ProfileRequests(store.pool, replies.request_profile))
        self.detection.checkpoint_s = options.checkpoint_s
        self.ingestor = Ingestor(store, replies.dead_letter, validate, validate_event,
                                 on_committed=self.detection.on_committed if options.detect else None,
                                 detection=self.detection if options.detect else None,
                                 request_keyframe=replies.request_keyframe, profiles=ProfileStore(store.pool),
                                 kernels=KernelStore(store.pool),
                                 keyframe_request_interval_s=options.keyframe_request_interval_s,
                                 stream_idle_s=options.stream_idle_s)
        self.detection.floors = self.ingestor
        self.source = source_for(self.ingestor)
        self.api: Any = None
        self.stop = stop or asyncio.Event()  # the background tasks' end (and a start's, while it waits)
        self.runner: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._parts = Parts()
        self._parts.add("the store", lambda _t: store.close())
        self._parts.add("detection", lambda _t: self.detection.close())

    async def start_api(self, settings: Any, port_given: bool, *, taken: Callable[[int, OSError], None],
                        lag: Callable[[], Mapping[int, int]] = dict, families: Callable[[], Iterable[Any]] = tuple,
                        not_ready: Callable[[], str | None] = lambda: None) -> Any:
        """The REST API, web page and collector /metrics, on their port; on a free one instead when
        the port was only the default and is taken (``taken`` says so). The last ``OSError`` is
        raised when no port could be had. Started first where the source may take long to join
        (Kafka not up yet): /healthz answers, /readyz says why it is not ready."""
        from collector.api.context import IngestStats
        from collector.api.server import ApiServer

        ingestor = self.ingestor
        stats = IngestStats(counters=lambda: ingestor.counters, lag=lag, families=families, not_ready=not_ready)
        ports = [settings.port] if port_given else [settings.port, 0]
        for port in ports:
            api = ApiServer(self.store.pool, settings.model_copy(update={"port": port}), stats)
            try:
                await api.start()
            except OSError as exc:
                if port == ports[-1]:
                    raise
                taken(port, exc)
                continue
            self.api = api
            # stopped after the drain: the data stays readable while the last batches are stored
            self._parts.add("the API", self._stop_api)
            return api
        raise AssertionError("unreachable: the last port raises")

    async def _stop_api(self, _timeout: float) -> None:
        if self.api is not None:
            await self.api.stop()

    async def start(self) -> None:
        """Connect the source (waiting while its transport is away), then run the consume loop and
        the background work. A stop requested meanwhile (:attr:`stop`) ends the wait."""
        from collector.loop import ConsumeLoop
        from collector.periodic import every

        if self.stop.is_set() or not await self._connect():
            return
        store, stop = self.store, self.stop
        if not stop.is_set():  # (a stop that came as it connected starts nothing more)
            self.runner = asyncio.create_task(ConsumeLoop(self.source, self.ingestor).run())
            self._tasks = [
                asyncio.create_task(every(self.options.maintenance_s, stop, store.maintain, "maintenance")),
                asyncio.create_task(every(USAGE_EVERY_S, stop, store.refresh_usage, "service usage rollup")),
                asyncio.create_task(self.detection.run(stop))]
        self._parts.add("the background tasks", self._finish_tasks)
        self._parts.add("the replies", self._stop_replies, most=10.0)
        self._parts.add("the consume loop", self._drain)
        self._parts.add("the source", self.source.shutdown, most=10.0)

    def add_task(self, work: Coroutine[Any, Any, None], name: str, stop: Callable[[float], Awaitable[None]]) -> None:
        """Run ``work`` beside the stack (it ends when :attr:`stop` is set); ``stop`` closes its
        clients when the stack shuts down, before the background tasks are awaited."""
        self._tasks.append(asyncio.create_task(work))
        self._parts.add(name, stop, most=10.0)

    async def _connect(self) -> bool:
        """The replies, then the source (each may wait for its transport), unless stopped meanwhile."""
        replies: Any = self.replies

        async def both() -> None:
            if hasattr(replies, "start"):
                await replies.start()
            await self.source.start()

        starting = asyncio.create_task(both())
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not starting.done():
            await self.source.shutdown(10.0)
            await self._stop_replies(10.0)
            starting.cancel()
            await asyncio.gather(starting, stopper, return_exceptions=True)
            return False
        await asyncio.gather(stopper, return_exceptions=True)
        starting.result()  # a failure to start is the command's to report
        return True

    async def _stop_replies(self, timeout: float) -> None:
        replies: Any = self.replies
        if hasattr(replies, "shutdown"):
            await replies.shutdown(timeout)

    async def _drain(self, timeout: float) -> None:
        """Let the loop store what the source handed over (it ends when the source is finished)."""
        runner = self.runner
        if runner is None or runner.done():
            return
        await asyncio.wait({runner}, timeout=timeout)  # its failure is the command's to report (failure())
        if not runner.done():
            log.warning("the consume loop did not drain within the shutdown deadline; stopping it")
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    async def _finish_tasks(self, timeout: float) -> None:
        self.stop.set()
        tasks = self._tasks
        pending = (await asyncio.wait(tasks, timeout=timeout))[1] if tasks else set()
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def failure(self) -> BaseException | None:
        """Why the consume loop ended, if it failed."""
        runner = self.runner
        if runner is None or not runner.done() or runner.cancelled():
            return None
        return runner.exception()

    async def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for what the source holds to be fetched (True: nothing left)."""
        return await self.source.flush(timeout)

    async def shutdown(self, timeout: float = SHUTDOWN_S) -> None:
        """Stop every part, last-started first, under one deadline."""
        self.stop.set()
        await self._parts.shutdown(timeout)


def _conforms(stack: CollectorStack) -> Lifecycle:
    return stack  # mypy checks that the stack has the one lifecycle
