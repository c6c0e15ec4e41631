"""The agent's runtime: discovery, the sampling loop, XID events, lost-GPU retry, sinks.

One sampling thread serves every GPU from a due-time queue; NVML calls are microseconds,
so a thread per GPU would only add contention. :meth:`Agent.step` holds all decisions and
takes ``now`` as an argument, so tests drive it with fake time and a fake CPU clock;
:meth:`Agent.start` merely runs it in a thread against the real clocks. XID events block
in ``nvmlEventSetWait`` on a thread of their own.

Records and events go to sinks (callables) given to the constructor by whoever runs the
agent: the exporter's state is kept here, JSON Lines export and the framer (Kafka or the
in-process transport) are sinks. A sink that raises is counted and logged; sampling goes on.

The CPU budget is kept on the agent's own threads (:mod:`agent.cpuclock`): the sampling
and XID threads form the ``sampling`` account, and the time the sampling thread spends in
sinks (encoding frames for the transport) is moved to the ``transport`` account, which
the sender paces with a budget of its own. The budget may lengthen intervals, never past
the ceiling: every GPU is sampled at least every ``ceiling`` seconds, whatever the load;
when it lengthens them, a log line says so (rate-limited) and ``/metrics`` counts it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pynvml as nv

from agent import calibrate
from agent.cpuclock import SAMPLING, TRANSPORT, ThreadCpu
from agent.devices import GpuTarget, discover
from agent.driver.base import Driver
from agent.host import HostReader
from agent.readers import READERS
from agent.sampler import IdentifyFn, Identity, Sampler, anonymous
from agent.scheduler import AdaptiveInterval, CpuBudget, DueQueue, is_busy, slow_periods, volatility
from agent.stats import Snapshot
from agent.transitions import GpuTransitions
from telemetry.ratelimit import RateLimitedLog
from telemetry.records import EventRecord, GpuRecord, ProcessRecord
from telemetry.xid import GPU_LOST

log = logging.getLogger(__name__)

RecordSink = Callable[[GpuRecord], None]
# calls that may go on a slow period; GPM and the process list stay on every sample
SLOWABLE = frozenset(READERS) | {"process_utilization"}
RECOST_EVERY_S = 30.0
EventSink = Callable[[EventRecord], None]


def new_instance_id() -> str:
    """A random id for this agent process (16 hex characters): the ``instance`` header of its messages."""
    return secrets.token_hex(8)


class Attribution(Protocol):
    """What the agent needs from attribution (agent.attribution.Attributor and the simulated one)."""

    def identify(self, pid: int) -> Identity: ...
    def gpu_owners(self) -> Mapping[str, Sequence[Identity]]: ...
    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def sources(self) -> list[str]: ...


class PodFigures(Protocol):
    """Figures of the pods on this node added to the records of the GPUs they hold
    (agent.inference.scraper.InferenceScraper: their inference servers'), on a thread of their own."""

    def add_to(self, t: GpuTarget, processes: Sequence[ProcessRecord], metrics: dict[str, float]) -> None: ...
    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def stats(self) -> Sequence[Snapshot]: ...


@dataclass(slots=True)
class ScheduleConfig:
    floor: float = 0.25
    ceiling: float = 10.0
    busy: float = 1.0
    cpu_budget: float = 0.01
    slow_call_threshold: float = 0.001  # seconds
    slow_call_duty: float = 0.001  # share of a core one slow call may take


@dataclass(slots=True)
class _GpuState:
    interval: AdaptiveInterval
    prev_metrics: dict[str, float] | None = None
    prev_pids: frozenset[int] = frozenset()
    slow_next: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    effective_interval: float = 0.0
    transitions: GpuTransitions | None = None  # throttling and ECC events from the samples


class Agent:
    def __init__(
        self,
        driver: Driver,
        node: str,
        config: ScheduleConfig | None = None,
        attribution: Attribution | None = None,
        clock: Callable[[], float] = time.time,
        cpu_clock: Callable[[], float] = time.thread_time,
        budget_cpu_clock: Callable[[], float] | None = None,
        calibrate_calls: bool = True,
        cpu: ThreadCpu | None = None,
        instance: str | None = None,
        record_sinks: Sequence[RecordSink] = (),
        event_sinks: Sequence[EventSink] = (),
        host: HostReader | None = None,
        pod_figures: PodFigures | None = None,
    ) -> None:
        """``cpu_clock`` times one sample on the sampling thread; ``budget_cpu_clock`` is what the
        budget's feedback reads (default: the ``sampling`` account of ``cpu``, the agent's threads).
        Every record and event goes to each of ``record_sinks`` and ``event_sinks``, in order.
        ``host`` adds the host evidence of each GPU's processes to its records (read on the
        sampling thread inside each sample's CPU cost, so the budget covers it); None: off.
        ``pod_figures`` (optional) adds its figures to each record and runs from start() to stop()."""
        self.driver = driver
        self.node = node
        self.instance = instance or new_instance_id()
        self.config = config or ScheduleConfig()
        self.attribution = attribution
        self.host = host
        self.pod_figures = pod_figures
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.cpu = cpu or ThreadCpu()
        own = budget_cpu_clock or (lambda: self.cpu.seconds(SAMPLING))
        self.budget = CpuBudget(self.config.cpu_budget, cpu_clock=own, wall_clock=clock)
        self.budget_stretched_total = 0  # samples whose next interval the budget lengthened
        self.budget_capped_total = 0  # ... and would have lengthened past the ceiling
        self._stretched_in_step = False
        self._log = RateLimitedLog(log)
        self.calibrate_calls = calibrate_calls
        self.targets: dict[str, GpuTarget] = {}
        self.state: dict[str, _GpuState] = {}
        self.latest: dict[str, GpuRecord] = {}
        self.calibration: dict[str, float] = {}
        self.slow_period: dict[str, float] = {}
        self.queue = DueQueue()
        self.record_sinks: tuple[RecordSink, ...] = tuple(record_sinks)
        self.event_sinks: tuple[EventSink, ...] = tuple(event_sinks)
        self.errors: Counter[str] = Counter()
        self.samples_total = 0
        self.sample_cpu_seconds = 0.0
        self.driver_version = ""
        self.healthy_count = 0
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set when another thread makes a GPU due now
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.sampler: Sampler | None = None
        self._recost_at = 0.0
        self._recost_acc: dict[str, tuple[int, int]] = {}

    # ---- setup ----
    def open(self) -> None:
        """Initialise the driver, discover GPUs and measure call latencies (no threads)."""
        self.driver.init()
        self.driver_version = self.driver.driver_version()
        identify: IdentifyFn = self.attribution.identify if self.attribution else anonymous
        self.sampler = Sampler(self.driver, self.node, self.driver_version, identify, host=self.host,
                               enrich=self.pod_figures.add_to if self.pod_figures is not None else None)
        targets = discover(self.driver)
        if self.calibrate_calls and targets:
            whole = next((t for t in targets if t.parent is None and not t.mig_parent), targets[0])
            self.calibration = calibrate.measure(self.driver, whole)
        cfg = self.config
        self._set_slow_periods(self.calibration)
        now = self.clock()
        self._recost_at = now + RECOST_EVERY_S
        for t in targets:
            self.targets[t.key] = t
            self.state[t.key] = _GpuState(AdaptiveInterval(cfg.floor, cfg.ceiling, cfg.busy))
            self.queue.put(t.key, now)
        self.healthy_count = len(targets)
        log.info(
            "agent on %s (instance %s): %d GPU targets via %s driver %s; slow calls: %s",
            self.node, self.instance, len(targets), self.driver.kind, self.driver_version,
            ", ".join(f"{k} every {v:.1f}s" for k, v in self.slow_period.items()) or "none",
        )

    def _set_slow_periods(self, latency: Mapping[str, float]) -> None:
        cfg = self.config
        polled = {k: v for k, v in latency.items() if k in SLOWABLE}
        self.slow_period = slow_periods(polled, cfg.slow_call_threshold, cfg.slow_call_duty)
        if self.sampler is not None:
            self.sampler.slow = frozenset(self.slow_period)

    def _recost(self) -> None:
        """Re-derive slow periods from the latency of the last window: calls slow down under load
        (on the H200, process utilisation went from ~50 µs idle to ~2 ms during training)."""
        assert self.sampler is not None
        acc = {k: (ns, n) for k, (ns, n) in self.sampler.stats.acc.items()}
        window = {
            k: (ns - self._recost_acc.get(k, (0, 0))[0]) * 1e-9 / (n - self._recost_acc.get(k, (0, 0))[1])
            for k, (ns, n) in acc.items() if n > self._recost_acc.get(k, (0, 0))[1]
        }
        self._recost_acc = acc
        self._set_slow_periods({**self.calibration, **window})

    # ---- the loop body ----
    def step(self, now: float) -> float | None:
        """Sample every GPU that is due at ``now``; return the next due time."""
        assert self.sampler is not None, "open() first"
        for key in self.queue.pop_due(now):
            t = self.targets[key]
            if not t.healthy:
                self._retry(t, now)
                continue
            self._sample(t, now)
        if now >= self._recost_at:
            self._recost()
            self._recost_at = now + RECOST_EVERY_S
        self.budget.observe()
        if self._stretched_in_step:
            self._stretched_in_step = False
            ceiling = self.config.ceiling
            self._log.warning(
                "budget", "CPU budget: the agent's sampling threads use %.2f%% of a core against a budget of "
                "%.2f%% (%.1f ms a sample); intervals lengthened to at least %.2f s (feedback x%.1f, never past the "
                "%.0f s ceiling; %d sample(s) held at it)", 100 * self.budget.usage(), 100 * self.budget.fraction,
                1000 * self.budget.cost_per_sample, self.budget.min_interval(self.healthy_count) * self.budget.stretch,
                self.budget.stretch, ceiling, self.budget_capped_total)
        elif self.budget.stretch == 1.0:
            self._log.resolved("budget", "CPU budget: sampling intervals are back to what the GPUs need")
        return self.queue.peek()

    def _sample(self, t: GpuTarget, now: float) -> None:
        assert self.sampler is not None
        st = self.state[t.key]
        slow_due = frozenset(s for s in self.slow_period if now >= st.slow_next.get(s, 0.0))
        for s in slow_due:
            st.slow_next[s] = now + self.slow_period[s]
        cpu0 = self.cpu_clock()
        try:
            record = self.sampler.sample(t, now, slow_due)
        except nv.NVMLError_GpuIsLost:
            self._lost(t, now, "NVML reports GPU is lost")
            return
        cost = self.cpu_clock() - cpu0
        self.sample_cpu_seconds += cost
        self.budget.record_sample(cost)
        self.samples_total += 1
        st.samples += 1
        pids = frozenset(p.pid for p in record.processes)
        busy = is_busy(record.metrics) if record.metrics else False
        interval = st.interval.update(busy, volatility(st.prev_metrics, record.metrics), pids != st.prev_pids)
        st.prev_metrics, st.prev_pids = record.metrics, pids
        wanted = max(interval, self.budget.min_interval(self.healthy_count)) * self.budget.stretch
        # the budget may lengthen an interval, never past the ceiling: the ceiling is a promise
        st.effective_interval = min(wanted, max(interval, self.config.ceiling))
        if wanted > interval:
            self.budget_stretched_total += 1
            capped = wanted > st.effective_interval
            self.budget_capped_total += capped
            # the budget's floor (cost per sample over the budget) is routine; a line is for when the
            # agent is over its budget (feedback stretch) or a GPU is held at the ceiling
            self._stretched_in_step |= capped or self.budget.stretch > 1.0
        self.queue.put(t.key, now + st.effective_interval)
        with self._lock:
            self.latest[t.key] = record
        self._to_sinks(self.record_sinks, record)
        if st.transitions is None:
            st.transitions = GpuTransitions(self.node, t.key)
        for event in st.transitions.update(record.ts, record.metrics):
            self._emit(event)
        if len(self.latest) == len(self.targets):
            self.ready.set()

    def _to_sinks(self, sinks: Sequence[Callable[[Any], None]], item: GpuRecord | EventRecord) -> None:
        """Hand ``item`` to each sink; their CPU time is the transport's, not the sampler's."""
        if not sinks:
            return
        cpu0 = time.thread_time()
        for sink in sinks:
            try:
                sink(item)
            except Exception as exc:  # noqa: BLE001 - a sink's bug must not stop sampling: counted, logged
                kind = f"sink:{type(exc).__name__}"
                self.errors[kind] += 1
                self._log.error(kind, "a record sink failed: %r; sampling goes on", exc)
        self.cpu.transfer(SAMPLING, TRANSPORT, time.thread_time() - cpu0)

    # ---- failures ----
    def _emit(self, event: EventRecord) -> None:
        self._to_sinks(self.event_sinks, event)

    def _lost(self, t: GpuTarget, now: float, why: str) -> None:
        if t.healthy:
            log.error("GPU %s (index %d) lost: %s; retrying with backoff", t.key, t.index, why)
            self._emit(EventRecord(now, self.node, t.key, "gpu_lost", None, why))
        t.healthy = False
        if self.host is not None:
            self.host.forget(t.key)
        self.healthy_count = sum(1 for x in self.targets.values() if x.healthy)
        self.errors["gpu_lost"] += 1
        t.retry_at = now + t.retry_backoff
        self.queue.put(t.key, t.retry_at)

    def _retry(self, t: GpuTarget, now: float) -> None:
        try:
            h = self.driver.handle_by_uuid(t.key)
            self.driver.memory(h)
        except nv.NVMLError as exc:
            t.retry_backoff = min(60.0, t.retry_backoff * 2)
            self._lost(t, now, str(exc))
            return
        t.handle, t.healthy, t.retry_backoff = h, True, 1.0
        self.healthy_count = sum(1 for x in self.targets.values() if x.healthy)
        log.warning("GPU %s is back", t.key)
        self._emit(EventRecord(now, self.node, t.key, "gpu_recovered"))
        self.queue.put(t.key, now)

    def on_xid(self, uuid: str, xid: int) -> None:
        """An XID event (from the event thread): remember it, report it, and act on a lost GPU (79)."""
        assert self.sampler is not None
        now = self.clock()
        self.sampler.xid[uuid] = xid
        self.errors[f"xid_{xid}"] += 1
        self._emit(EventRecord(now, self.node, uuid, "xid", xid))
        t = self.targets.get(uuid)
        if t is not None:
            self.queue.put(uuid, now)  # sample it now: XIDs are when detail matters
            self._wake.set()
            if xid == GPU_LOST.code:
                self._lost(t, now, f"XID {xid}: {GPU_LOST.meaning}")

    # ---- threads ----
    def start(self) -> None:
        if self.sampler is None:
            self.open()
        if self.attribution is not None:
            self.attribution.start()
        if self.pod_figures is not None:
            self.pod_figures.start()
        self._threads = [
            self.cpu.spawn(SAMPLING, self._run, "gpuwatch-sampler"),
            self.cpu.spawn(SAMPLING, self._xid_loop, "gpuwatch-xid"),
        ]
        for th in self._threads:
            th.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                next_at = self.step(self.clock())
            except nv.NVMLError as exc:  # a driver error outside any one GPU: count it, keep going
                kind = f"loop:{exc.__class__.__name__}"
                self.errors[kind] += 1
                self._log.error(kind, "sampling loop error: %s", exc)
                next_at = None
            wait = 5.0 if next_at is None else next_at - self.clock()
            self._wake.wait(min(max(wait, 0.0), 5.0))
            self._wake.clear()

    def _xid_loop(self) -> None:
        try:
            event_set = self.driver.event_set()
            for t in self.targets.values():
                if t.parent is None:
                    try:
                        self.driver.register_xid(t.handle, event_set)
                    except nv.NVMLError as exc:
                        log.info("XID events not available on %s: %s", t.key, exc)
        except nv.NVMLError as exc:
            log.warning("XID event set could not be created: %s", exc)
            return
        while not self._stop.is_set():
            try:
                event = self.driver.wait_event(event_set, 2000)
            except nv.NVMLError_Timeout:
                continue
            except nv.NVMLError as exc:
                kind = f"xid_wait:{exc.__class__.__name__}"
                self.errors[kind] += 1
                self._log.warning(kind, "waiting for XID events failed: %s; retrying", exc)
                self._stop.wait(1.0)
                continue
            self.on_xid(event.uuid, event.xid)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads and release NVML; safe to call twice."""
        self._stop.set()
        self._wake.set()
        for th in self._threads:
            th.join(timeout)
        self._threads = []
        if self.pod_figures is not None:
            self.pod_figures.stop(timeout)
        if self.attribution is not None:
            self.attribution.stop(timeout)
        if self.sampler is not None:
            try:
                self.driver.shutdown()
            except nv.NVMLError as exc:
                log.info("NVML shutdown: %s", exc)
            self.sampler = None

    # ---- views for the exporter ----
    def snapshot(self) -> list[tuple[GpuTarget, GpuRecord | None]]:
        with self._lock:
            return [(t, self.latest.get(k)) for k, t in self.targets.items()]

    def owners(self) -> Mapping[str, Sequence[Identity]]:
        return self.attribution.gpu_owners() if self.attribution else {}

    def interval(self, key: str) -> float:
        return self.state[key].effective_interval
