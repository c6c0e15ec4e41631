"""The inference scraper: a thread that scrapes the pods that ask, and what the sampler reads of it.

Why a thread of its own, running an asyncio loop: GPU sampling must never wait on a pod's
HTTP server. Every ``period`` seconds the loop scrapes all targets at once, each bounded by
``timeout`` (:mod:`agent.inference.fetch`), so one dead or hanging endpoint costs its own
figures and nothing else, and a round of many pods takes about the slowest one. The
thread is registered with the agent's CPU ledger under the ``inference`` account
(:mod:`agent.cpuclock`), so ``gpuwatch_agent_cpu_seconds{account="inference"}`` is what
scraping costs.

What a round leaves is one dict, pod -> its figures (the catalog's ``gpuwatch_inference_*``
rows), replaced whole at the end of the round; the sampling thread reads it without a
lock (:meth:`InferenceScraper.add_to`, called by :class:`agent.sampler.Sampler` for each
GPU record) and copies the figures of the pod that holds the GPU into the record: the
kubelet's allocation first, else the pod of a process on it. So every GPU of a multi-GPU
pod carries the same, pod-wide, figures. A pod whose last scrape failed, that stopped
asking, or that is gone has no figures: its rows are absent from the records and from
``/metrics`` until it answers again (its counters are kept, so the first good scrape after
a failure gives a rate over the whole gap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from agent.attribution.pods import PodInfo
from agent.cpuclock import INFERENCE, ThreadCpu
from agent.devices import GpuTarget
from agent.inference import triton, vllm
from agent.inference.fetch import DEFAULT_MAX_BYTES, FetchError, fetch
from agent.inference.parse import parse, quote
from agent.inference.rates import Scrape
from agent.inference.targets import Target, Targets
from agent.sampler import Identity
from agent.stats import counter, gauge, snapshot
from telemetry.catalog import CATALOG
from telemetry.ratelimit import RateLimitedLog
from telemetry.records import ProcessRecord

log = logging.getLogger(__name__)

#: the catalog rows this module fills
SCRAPED_KEYS: Final = tuple(m.key for m in CATALOG if m.cost == "scrape")
#: every sample name a server module reads; the parser skips the rest of a page
WANTED: Final = triton.NAMES | vllm.NAMES
PodKey = tuple[str, str]  # namespace, pod


@snapshot
class ScrapeStats:
    """The scraper's own figures on ``/metrics``."""

    targets: int = gauge("gpuwatch_agent_inference_targets",
                         "Pods on this node that ask to be scraped (annotation gpuwatch.io/scrape-port).")
    scrapes_total: int = counter("gpuwatch_agent_inference_scrapes", "Scrapes of inference endpoints that gave a page.")
    timeouts_total: int = counter("gpuwatch_agent_inference_scrape_timeouts",
                                  "Scrapes that gave no complete page within the timeout.")
    connect_errors_total: int = counter("gpuwatch_agent_inference_scrape_connect_errors",
                                        "Scrapes whose connection was refused or failed.")
    http_errors_total: int = counter("gpuwatch_agent_inference_scrape_http_errors",
                                     "Scrapes answered with an HTTP status other than 200.")
    protocol_errors_total: int = counter("gpuwatch_agent_inference_scrape_protocol_errors",
                                         "Scrapes whose answer was not HTTP, was cut short, or was too large.")
    bad_lines_total: int = counter("gpuwatch_agent_inference_bad_lines",
                                   "Malformed lines in scraped pages (skipped; the rest of the page is used).")
    round_seconds: float = gauge("gpuwatch_agent_inference_round_seconds",
                                 "Wall time of the last round of scrapes (all targets at once).")


_FAILURE_FIELDS: Final = {"timeout": "timeouts_total", "connect": "connect_errors_total", "http": "http_errors_total",
                          "protocol": "protocol_errors_total", "too_large": "protocol_errors_total"}


class InferenceScraper:
    """Scrapes this node's pods that ask for it; adds their figures to the records of their GPUs."""

    def __init__(
        self,
        pods: Callable[[], Iterable[PodInfo]],
        owners: Callable[[], Mapping[str, Sequence[Identity]]],
        *,
        cpu: ThreadCpu,
        period: float = 5.0,
        timeout: float = 1.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``pods`` lists this node's pods (the attribution's pod cache); ``owners`` maps a GPU UUID
        to the pods the kubelet gave it (the attribution's ``gpu_owners``)."""
        self._pods = pods
        self._owners = owners
        self._cpu = cpu
        self.period = period
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._clock = clock
        self._targets = Targets()
        self._prev: dict[PodKey, Scrape] = {}
        self.latest: dict[PodKey, dict[str, float]] = {}  # replaced whole, read lock-free
        self._counts: Counter[str] = Counter()
        self._n_targets = 0
        self._round_s = 0.0
        self._log = RateLimitedLog(log)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    # ---- what the sampler calls (sampling thread) ----
    def add_to(self, t: GpuTarget, processes: Sequence[ProcessRecord], metrics: dict[str, float]) -> None:
        """Put the figures of the pod holding ``t`` into ``metrics``; drop stale ones from ``/metrics``."""
        last = t.last_metrics
        for key in SCRAPED_KEYS:
            last.pop(key, None)
        latest = self.latest
        if not latest:
            return
        allocated: list[PodKey] = sorted(
            (o.namespace or "", o.pod or "") for o in self._owners().get(t.key, ()) if o.pod)
        running: list[PodKey] = sorted({(p.namespace or "", p.pod or "") for p in processes if p.pod})
        for pod in (*allocated, *running):
            figures = latest.get(pod)
            if figures:
                metrics.update(figures)
                return

    def stats(self) -> tuple[ScrapeStats, ...]:
        c = self._counts
        fields = {name: 0 for name in _FAILURE_FIELDS.values()}
        for kind, name in _FAILURE_FIELDS.items():
            fields[name] += c[kind]
        return (ScrapeStats(targets=self._n_targets, scrapes_total=c["ok"], bad_lines_total=c["bad_lines"],
                            round_seconds=self._round_s, **fields),)

    # ---- one round (the scraper's thread; tests call it directly) ----
    async def scrape_once(self) -> None:
        """Scrape every target once, all at the same time; publish the figures."""
        t0 = time.monotonic()
        targets = self._targets.of(self._pods())
        results = await asyncio.gather(*(self._scrape(t) for t in targets))
        keys = {t.key for t in targets}
        for gone in set(self._prev) - keys:
            del self._prev[gone]
        self.latest = {t.key: figures for t, figures in zip(targets, results, strict=True) if figures}
        self._n_targets = len(targets)
        self._round_s = time.monotonic() - t0

    async def _scrape(self, t: Target) -> dict[str, float] | None:
        where = f"inference endpoint of pod {t.namespace}/{t.pod} ({t.url})"
        try:
            body = await fetch(t.host, t.port, t.path, self.timeout, self.max_bytes)
        except FetchError as exc:
            self._counts[exc.kind] += 1
            self._log.warning(f"scrape {t.key}", "%s: %s; its figures are absent until it answers", where, exc)
            return None
        self._counts["ok"] += 1
        self._log.resolved(f"scrape {t.key}", "%s answers again", where)
        text = body.decode("utf-8", "replace")
        parsed = parse(text, WANTED)
        if parsed.bad:
            self._counts["bad_lines"] += len(parsed.bad)
            number, why = parsed.bad[0]
            self._log.warning(f"lines {t.key}", "%s: line %d is malformed (%s): %s; %d bad line(s) skipped, "
                              "the rest of the page is used", where, number, why, quote(text, number), len(parsed.bad))
        cur = Scrape.of(self._clock(), parsed.samples)
        prev = self._prev.get(t.key)
        self._prev[t.key] = cur
        return {**triton.figures(prev, cur), **vllm.figures(prev, cur)}

    # ---- lifecycle ----
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = self._cpu.spawn(INFERENCE, self._run, "gpuwatch-inference")
        self._thread.start()
        log.info("inference scraper: pods with annotation gpuwatch.io/scrape-port are scraped every %g s "
                 "(timeout %g s)", self.period, self.timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (a round in progress is abandoned); safe to call twice."""
        self._stop.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed: the thread is ending anyway
                loop.call_soon_threadsafe(wake.set)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("inference scraper thread did not stop within %.1f s", timeout)

    def _run(self) -> None:
        asyncio.run(self._rounds())

    async def _rounds(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        while not self._stop.is_set():
            started = time.monotonic()
            round_task = asyncio.ensure_future(self.scrape_once())
            stopper = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait({round_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not round_task.done():  # stopping: abandon the round
                round_task.cancel()
                break
            stopper.cancel()
            exc = round_task.exception()
            if exc is not None:  # a bug in one round must not end scraping: counted, logged
                self._counts["round_error"] += 1
                self._log.error("round", "inference scrape round failed: %r; scraping goes on", exc)
            rest = self.period - (time.monotonic() - started)
            if rest > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), rest)
