"""The collector's detection and alerting service: stored records in, anomalies and alerts out.

Why it hangs off the ingest commit: detectors must see each record once and only records
that are stored, so the ingestor calls :meth:`DetectionService.on_committed` after every
successful store write. That call is synchronous and cheap (the detectors are pure
Python over the batch); database work happens in :meth:`flush` (anomalies, alert rows
and outbox rows in one transaction) and :meth:`dispatch` (sending the outbox), which
:meth:`run` calls about once a second. Time for for-durations and repeats is the newest
record time, like the detectors'. :meth:`close` flushes and sends what is due, bounded by
a timeout, so a clean shutdown loses nothing and a crash loses nothing stored.

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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from collector.alerting import outbox
from collector.alerting.delivery import DEFAULT_POLICY, RetryPolicy, Transport, UrllibTransport
from collector.alerting.router import Router
from collector.alerting.rules import RuleSet
from collector.alerting.silences import Silence, load_active
from collector.detect.anomaly import Anomaly
from collector.detect.engine import Change, DetectionEngine
from collector.periodic import every
from collector.store import alert_tables
from telemetry.records import EventRecord, GpuRecord

log = logging.getLogger(__name__)

#: called with the anomalies a flush opened, each with its row id
OnOpened = Callable[[Sequence[tuple[Anomaly, int]]], Awaitable[None]]


class DetectionService:
    def __init__(self, pool: Any, rules: RuleSet | None = None, *, engine: DetectionEngine | None = None,
                 transport: Transport | None = None, policy: RetryPolicy = DEFAULT_POLICY,
                 silence_refresh_s: float = 10.0, on_opened: OnOpened | None = None) -> None:
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

    # ---- the ingest hook ----
    def on_committed(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        feed = self.engine.feed
        for record in records:
            self._changes.extend(feed(record))
            if record.ts > self._now:
                self._now = record.ts
        for event in events:
            self._changes.extend(self.engine.feed_event(event))
        self.counters["records"] += len(records)

    # ---- database work ----
    async def flush(self) -> int:
        """Persist anomaly changes and alert decisions; returns the outbox rows enqueued."""
        async with self._lock:
            changes, self._changes = self._changes, []
            if not changes and self._now <= 0:
                return 0
            wall = time.time()
            if wall - self._silences_at >= self.silence_refresh_s:
                async with self.pool.acquire() as conn:
                    self._silences = await load_active(conn, datetime.fromtimestamp(wall, UTC))
                self._silences_at = wall
            for change in changes:
                self.router.on_change(change, self._now)
            alerts, notes = self.router.tick(self._now, self._silences, wall)
            rows = outbox.rows_for(notes, self.rules.channels)
            latest = {c.anomaly.key: c.anomaly for c in changes}  # an anomaly's last change is its state
            for alert in alerts:
                latest.setdefault(alert.anomaly.key, alert.anomaly)
            anomalies = list(latest.values())
            if not anomalies and not alerts and not rows:
                return 0
            async with self.pool.acquire() as conn, conn.transaction():
                ids = await alert_tables.upsert_anomalies(conn, anomalies)
                await alert_tables.upsert_alerts(conn, alerts, ids)
                enqueued = await outbox.enqueue(conn, rows)
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
        await self.flush()
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
