"""The collector's detection and alerting service: stored records in, anomalies and alerts out.

Why it hangs off the ingest commit: detectors must see each record once and only records
that are stored, so the ingestor calls :meth:`DetectionService.on_committed` after every
successful store write. That call is synchronous and cheap (the detectors are pure
Python over the batch); database work happens in :meth:`flush` (anomalies, alert rows
and outbox rows in one transaction) and :meth:`dispatch` (sending the outbox), which
:meth:`run` calls about once a second. Time for for-durations and repeats is the newest
record time, like the detectors'. :meth:`close` flushes and sends what is due, bounded by
a timeout, so a clean shutdown loses nothing and a crash loses nothing stored.

Detector state outlives the process (issue 16): each node's state is saved in the flush that
stores its anomalies (so a saved open anomaly is a stored one) and, for the other nodes fed,
every ``checkpoint_s`` (300 s: a GPU's save costs about 40 of its records' detection, so
once in 300 records adds about 14% to detection; benchmarks/bench_checkpoint.py).
:meth:`prepare`, awaited by the ingestor before a batch is judged, takes over the saved
state of a node this process has not judged yet, and the router the alerts that state holds
open (one that fired is not notified again; its resolution is sent once). :meth:`release`
saves the nodes of partitions being revoked, :meth:`forget` drops those that went to another
replica. A record at or before a GPU's saved state is not judged again.

``on_opened``, when given, is awaited after each flush with the anomalies that flush
opened and their row ids (the collector asks for a CPU profile of a throughput drop's
GPU there: :mod:`collector.profiling`); a failure there is logged and counted, never
stops alerting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily

from collector.alerting import outbox
from collector.alerting.delivery import DEFAULT_POLICY, RetryPolicy, Transport, UrllibTransport
from collector.alerting.router import Router
from collector.alerting.rules import RuleSet
from collector.alerting.silences import Silence, load_active
from collector.detect import checkpoint
from collector.detect.anomaly import Anomaly
from collector.detect.engine import Change, DetectionEngine
from collector.periodic import every
from collector.store import alert_tables, detector_state
from telemetry.ratelimit import RateLimitedLog
from telemetry.records import EventRecord, GpuRecord

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log)

#: called with the anomalies a flush opened, each with its row id
OnOpened = Callable[[Sequence[tuple[Anomaly, int]]], Awaitable[None]]


class Floors(Protocol):
    """Where the consumer must re-read from for the state not yet saved (collector.ingest.Ingestor)."""

    def take_floors(self, nodes: set[str]) -> dict[str, tuple[int, int]]: ...

    def saved_floors(self, floors: dict[str, tuple[int, int]]) -> None: ...

    def put_floors(self, floors: dict[str, tuple[int, int]]) -> None: ...


class DetectionService:
    def __init__(self, pool: Any, rules: RuleSet | None = None, *, engine: DetectionEngine | None = None,
                 transport: Transport | None = None, policy: RetryPolicy = DEFAULT_POLICY,
                 silence_refresh_s: float = 10.0, on_opened: OnOpened | None = None,
                 checkpoint_s: float = 300.0, state_max_age_s: float = 6 * 3600.0) -> None:
        self.pool = pool
        self.rules = rules or RuleSet()
        self.engine = engine or DetectionEngine()
        self.router = Router(self.rules)
        self.transport = transport or UrllibTransport()
        self.policy = policy
        self.silence_refresh_s = silence_refresh_s
        self.on_opened = on_opened
        self.counters: Counter[str] = Counter()
        self._changes: list[Change] = []
        self._now = 0.0
        self._silences: list[Silence] = []
        self._silences_at = -1e18
        self._lock = asyncio.Lock()
        self.checkpoint_s = checkpoint_s
        self.state_max_age_s = state_max_age_s
        self._known: set[str] = set()  # nodes judged here, or whose saved state was looked for
        self._dirty: set[str] = set()  # nodes fed since their state was last saved
        self._saved_at = time.monotonic()
        self.floors: Floors | None = None  # the ingestor, once a stack wires it

    # ---- the ingest hooks ----
    async def prepare(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        """Take over the saved state of the nodes in this batch that this process has not judged."""
        nodes = {r.node for r in records} | {e.node for e in events}
        new = sorted(nodes - self._known)
        if not new:
            return
        self._known.update(new)
        since = min((r.ts for r in records), default=self._now) - self.state_max_age_s
        try:
            async with self.pool.acquire() as conn:
                saved = await detector_state.load(conn, new, since)
                fired = await detector_state.firing(conn, [s.node for s in saved]) if saved else set()
        except Exception as exc:  # noqa: BLE001 - without its state a node starts over, as on a first start
            self.counters["state_load_errors"] += 1
            _limited.warning("state-load", "detector state of %d nodes not loaded (%s: %s); their baselines "
                             "start over", len(new), type(exc).__name__, exc)
            return
        for row in saved:
            try:
                state = checkpoint.load(row.state, row.shape)
            except checkpoint.StateRefused as exc:
                self.counters["states_refused"] += 1
                _limited.warning("state-refused", "detector state of node %s not taken (%s); its baselines "
                                 "start over", row.node, exc)
                continue
            opened = self.engine.adopt(state)
            log.info("took over the detector state of node %s (saved at its record of %.0f; %d anomalies open)",
                     row.node, state.last_ts, len(opened))
            self.router.adopt(opened, frozenset(fired), max(self._now, state.last_ts))
            self.counters["states_restored"] += 1
            self.counters["anomalies_restored"] += len(opened)

    def on_committed(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        self._changes.extend(self.engine.feed_batch(records, events))
        for record in records:
            if record.ts > self._now:
                self._now = record.ts
        nodes = {r.node for r in records} | {e.node for e in events}
        self._dirty |= nodes
        self._known |= nodes
        self.counters["records"] += len(records)

    def judging(self) -> asyncio.Lock:
        """The lock a flush holds: the ingestor holds it while it judges a batch slice by slice."""
        return self._lock

    async def release(self, nodes: set[str]) -> None:
        """Save ``nodes`` now (their partitions are being revoked: the next owner starts from here)."""
        self._dirty |= nodes & self._known
        await self.flush(save=nodes)

    def forget(self, nodes: set[str]) -> None:
        """Drop ``nodes``: another replica judges them now (it took their saved state over)."""
        for node in nodes:
            self.router.forget(self.engine.forget(node))
            self._known.discard(node)
            self._dirty.discard(node)

    def families(self) -> Iterator[CounterMetricFamily]:
        """Prometheus families of the detectors' saved state (added to the collector's /metrics)."""
        for key, name, doc in (
            ("states_saved", "gpuwatch_collector_detector_states_saved", "node detector states saved"),
            ("states_restored", "gpuwatch_collector_detector_states_restored",
             "node detector states taken over (a restart, a partition moved here)"),
            ("states_refused", "gpuwatch_collector_detector_states_refused",
             "saved node states not taken (another build's shape, damaged): their baselines started over"),
            ("anomalies_restored", "gpuwatch_collector_anomalies_restored",
             "open anomalies taken over with a node's state (not opened again)"),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(self.counters.get(key, 0)))
            yield c

    def _states(self, nodes: set[str]) -> list[detector_state.SavedState]:
        out = []
        for node in sorted(nodes):
            state = self.engine.node_state(node)
            if not state.gpus:
                continue
            try:
                blob, shape = checkpoint.dump(state)
            except (checkpoint.StateRefused, TypeError, ValueError) as exc:  # a class that cannot be saved
                self.counters["state_save_errors"] += 1
                _limited.error("state-save", "detector state of node %s not saved (%s: %s)", node,
                               type(exc).__name__, exc)
                continue
            out.append(detector_state.SavedState(node, shape, state.last_ts, blob))
        return out

    # ---- database work ----
    async def flush(self, save: Collection[str] = ()) -> int:
        """Persist anomaly changes, alert decisions and the state of the nodes they came from (and of
        ``save``, and of every node fed, each ``checkpoint_s``); returns the outbox rows enqueued."""
        async with self._lock:
            changes, self._changes = self._changes, []
            if not changes and self._now <= 0:
                return 0
            wall = time.time()
            if wall - self._silences_at >= self.silence_refresh_s:
                # before the state is taken: a database away here leaves the changes and floors as they were
                try:
                    async with self.pool.acquire() as conn:
                        self._silences = await load_active(conn, datetime.fromtimestamp(wall, UTC))
                except BaseException:
                    self._changes[:0] = changes
                    raise
                self._silences_at = wall
            due = (set(save) | {c.anomaly.node for c in changes}) & self._dirty
            periodic = time.monotonic() - self._saved_at >= self.checkpoint_s
            if periodic:
                due, self._saved_at = set(self._dirty), time.monotonic()
            states = self._states(due)  # before the first await: the state these changes left
            floors = self.floors.take_floors({st.node for st in states}) if self.floors is not None else {}
            self._dirty -= due
            for change in changes:
                self.router.on_change(change, self._now)
            alerts, notes = self.router.tick(self._now, self._silences, wall)
            rows = outbox.rows_for(notes, self.rules.channels)
            latest = {c.anomaly.key: c.anomaly for c in changes}  # an anomaly's last change is its state
            for alert in alerts:
                latest.setdefault(alert.anomaly.key, alert.anomaly)
            anomalies = list(latest.values())
            if not anomalies and not alerts and not rows and not states:
                return 0
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    ids = await alert_tables.upsert_anomalies(conn, anomalies)
                    await alert_tables.upsert_alerts(conn, alerts, ids)
                    enqueued = await outbox.enqueue(conn, rows)
                    await detector_state.save(conn, states)
            except BaseException:
                self._dirty |= due  # saved next time, and re-read from where it was
                if self.floors is not None:
                    self.floors.put_floors(floors)
                raise
            if self.floors is not None:
                self.floors.saved_floors(floors)
            self.counters["states_saved"] += len(states)
            opened = [(c.anomaly, ids[c.anomaly.key]) for c in changes if c.action == "open"]
            self.counters["anomalies_opened"] += len(opened)
            self.counters["notifications"] += enqueued
            if opened and self.on_opened is not None:
                try:
                    await self.on_opened(opened)
                except Exception as exc:  # noqa: BLE001 - a profile request must never stop alerting: counted
                    self.counters["on_opened_errors"] += 1
                    log.warning("after %d anomalies opened: %s: %s", len(opened), type(exc).__name__, exc)
            return enqueued

    async def dispatch(self) -> outbox.DispatchStats:
        stats = await outbox.dispatch(self.pool, self.rules.channels, self.transport, policy=self.policy)
        self.counters["sent"] += stats.sent
        self.counters["send_failed"] += stats.failed
        if stats.failed:
            log.warning("%d alert notifications failed for good (see alert_outbox.last_error)", stats.failed)
        return stats

    async def run(self, stop: asyncio.Event, interval_s: float = 1.0) -> None:
        await every(interval_s, stop, self._round, "alert flush and dispatch")

    async def _round(self) -> None:
        await self.flush()
        await self.dispatch()

    async def close(self, timeout_s: float = 10.0) -> None:
        """Flush and send what is due, within ``timeout_s``; what is left stays in the outbox."""
        try:
            await asyncio.wait_for(self._final(), timeout_s)
        except TimeoutError:
            log.warning("detection service: shutdown timed out; unsent notifications stay in the outbox")

    async def _final(self) -> None:
        await self.flush(save=set(self._dirty))  # the next process takes over from here
        await self.dispatch()


def from_rules_file(pool: Any, path: str | None, on_opened: OnOpened | None = None) -> DetectionService:
    """The service with the rules of ``path`` (none: detection only, anomalies stored, nothing sent).

    Each bad rule is logged with its file and line and counted (``rule_errors``); the
    good ones still work, so a typo never takes alerting down.
    """
    from collector.alerting.rules import load_rules

    rules = load_rules(path) if path else RuleSet()
    for error in rules.errors:
        log.error("alert rules: %s", error)
    from collector.detect.finding import DetectorConfig

    config = DetectorConfig()
    if rules.idle_after_s is not None:
        config = replace(config, idle_after_s=rules.idle_after_s)
    if rules.metrics is not None:
        config = replace(config, metrics=rules.metrics)
    service = DetectionService(pool, rules, engine=DetectionEngine(config), on_opened=on_opened)
    service.counters["rule_errors"] = len(rules.errors)
    if path:
        log.info("alert rules: %d rules, %d channels from %s", len(rules.rules), len(rules.channels), path)
    return service
