"""The streaming detection engine: records in, anomalies opened and closed out.

Why one engine for live and replay: the collector feeds it the records of each stored
batch, ``gpuwatch replay`` feeds it a file; both see the same answers because every
decision depends only on the records and the engine's own state, and time is the
records' ``ts`` (never the wall clock).

Per record the engine updates the GPU's state, asks each detector whether its condition
holds, and applies hysteresis: a condition must hold for the detector's ``hold`` seconds
to open an anomaly (``start`` is that sample's time) and be clear for ``close_after_s``
(one-off events: ``event_close_after_s``) to close it. Specific explanations win over
generic ones on the same GPU: while a GPU is throttled, its lower SM activity is a
cause of the throttle anomaly, not a second anomaly; while it is lost, nothing else is
judged. Baselines are not updated while a performance condition holds, so an incident
does not become the new normal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from collector.detect import activity, errors, memory, throttle
from collector.detect.anomaly import SEVERITIES, Anomaly
from collector.detect.baseline import SeasonalBaseline
from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import (
    ECC_DBE,
    ECC_SBE,
    FB_FREE,
    FB_RESERVED,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    PCIE_REPLAY,
    POWER,
    POWER_LIMIT,
    REASONS,
    SM_ACTIVE,
    SM_CLOCK,
    XID,
    GpuState,
)
from collector.detect.xid import describe
from telemetry.records import EventRecord, GpuRecord

PERF_KINDS = frozenset({"thermal_throttle", "power_throttle", "straggler", "throughput_drop", "idle_allocated"})
EVENT_KINDS = frozenset({"xid", "ecc_dbe", "ecc_sbe_rising"})
_STALE_CHECK_EVERY = 5.0
_SLOW_EVERY = 5.0


@dataclass(frozen=True, slots=True)
class Change:
    """An anomaly that opened or closed at this record."""

    action: Literal["open", "close", "update"]
    anomaly: Anomaly


class DetectionEngine:
    """All detectors over a fleet's record stream; not thread-safe (one feeder)."""

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.cfg = config or DetectorConfig()
        self.gpus: dict[str, GpuState] = {}
        self.pods: dict[str, dict[str, GpuState]] = {}
        self.services: dict[str, dict[str, GpuState]] = {}
        self.node_ts: dict[str, float] = {}
        self._stale_checked: dict[str, float] = {}
        self.records = 0

    # ---- input ----
    def feed(self, record: GpuRecord) -> list[Change]:
        """Judge one record; returns the anomalies it opened or closed."""
        self.records += 1
        ts = record.ts
        st = self.gpus.get(record.gpu)
        if st is None:
            st = self.gpus[record.gpu] = GpuState(record.node, record.gpu, record.gpu_index)
        if ts < st.last_ts:
            return []  # out of order for this GPU: the contract says it does not happen; ignore it
        st.last_ts = ts
        if record.gpu_index is not None:
            st.gpu_index = record.gpu_index
        self._identity(st, record, ts)
        m = record.metrics
        sm = m.get(SM_ACTIVE)
        if sm is None:
            util = m.get(GPU_UTIL)
            sm = None if util is None else util / 100.0
        st.sm = sm
        st.clock = m.get(SM_CLOCK)
        st.temp = m.get(GPU_TEMP)
        st.reasons = int(m.get(REASONS, 0))
        changes = self._judge(st, ts, m)
        node_ts = self.node_ts.get(st.node, 0.0)
        if ts > node_ts:
            self.node_ts[st.node] = ts
            if ts - self._stale_checked.get(st.node, 0.0) >= _STALE_CHECK_EVERY:
                self._stale_checked[st.node] = ts
                changes.extend(self._stale(st.node, ts))
        return changes

    def feed_event(self, event: EventRecord) -> list[Change]:
        """An XID or GPU-lost event from the agent's event stream."""
        st = self.gpus.get(event.gpu)
        if st is None:
            st = self.gpus[event.gpu] = GpuState(event.node, event.gpu)
        finding: Finding | None = None
        if event.kind == "xid" and event.code:
            finding = errors.xid_finding(st, event.code, self.cfg)
        elif event.kind == "gpu_lost":
            finding = self._lost_finding(st, event.detail or "the agent lost the GPU")
        return self._apply(st, event.ts, [finding] if finding else [], complete=False)

    def feed_all(self, records: Iterable[GpuRecord]) -> list[Change]:
        out: list[Change] = []
        for record in records:
            out.extend(self.feed(record))
        return out

    def open_anomalies(self) -> list[Anomaly]:
        return [a for st in self.gpus.values() for a, _ in st.open.values()]

    # ---- state ----
    def _identity(self, st: GpuState, record: GpuRecord, ts: float) -> None:
        procs = record.processes
        pids = frozenset(p.pid for p in procs)
        if pids == st.pids:
            return
        st.pids, st.pids_since = pids, ts
        st.sm_base = SeasonalBaseline(1800.0)  # a new workload: its own normal
        st.fb.clear()
        st.leak = None
        who = next((p for p in procs if p.pod), procs[0] if procs else None)
        ns, pod, svc = (who.namespace, who.pod, who.service) if who else (None, None, None)
        if (ns, pod, svc) == (st.namespace, st.pod, st.service):
            return
        for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
            if key is not None and key in groups:
                groups[key].pop(st.gpu, None)
        st.namespace, st.pod, st.service = ns, pod, svc
        for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
            if key is not None:
                groups.setdefault(key, {})[st.gpu] = st

    def _peers(self, groups: dict[str, dict[str, GpuState]], key: str | None, st: GpuState,
               ts: float) -> list[GpuState]:
        if key is None:
            return []
        members = groups.get(key)
        if not members or len(members) < 2:
            return []
        return [p for p in members.values() if p is not st and ts - p.last_ts < 30.0 and p.pids]

    def _judge(self, st: GpuState, ts: float, m: dict[str, float]) -> list[Change]:
        cfg = self.cfg
        found: list[Finding] = []
        for f in (
            errors.xid(st, m.get(XID), ts, cfg),
            errors.ecc_dbe(st, m.get(ECC_DBE), ts, cfg),
            errors.ecc_sbe(st, m.get(ECC_SBE), ts, cfg),
            errors.pcie_replay(st, m.get(PCIE_REPLAY), ts, cfg),
        ):
            if f is not None:
                found.append(f)
        fb = st.fb
        if not fb or ts - fb[-1][0] >= memory.EVERY:  # the leak detector refits every few seconds only
            used = m.get(FB_USED)
            total = (used or 0.0) + m.get(FB_FREE, 0.0) + m.get(FB_RESERVED, 0.0)
            st.leak = memory.leak(st, ts, used, total, cfg)
        if st.leak is not None:
            found.append(st.leak)
        perf = throttle.thermal(st, cfg) or throttle.power(st, cfg, m.get(POWER), m.get(POWER_LIMIT))
        pod_peers = self._peers(self.pods, st.pod_key, st, ts)
        if perf is None:
            perf = activity.straggler(st, ts, cfg, pod_peers)
        if perf is None:
            svc_peers = [] if pod_peers else self._peers(self.services, st.service_key, st, ts)
            perf = activity.throughput(st, ts, cfg, pod_peers, svc_peers)
        if perf is None:
            perf = activity.idle_allocated(st, cfg)
        elif perf.kind in ("thermal_throttle", "power_throttle"):
            self._add_activity_cause(st, ts, perf)
        if perf is not None:
            found.append(perf)
        self._learn(st, ts, perf)
        return self._apply(st, ts, found, complete=True)

    @staticmethod
    def _add_activity_cause(st: GpuState, ts: float, perf: Finding) -> None:
        base = st.sm_base.current(ts)
        if st.sm is not None and base.count >= 60 and base.level > 0.2 and st.sm < 0.9 * base.level:
            perf.causes.append(f"SM activity {st.sm:.2f} vs baseline {base.level:.2f}: the throttle costs throughput")

    @staticmethod
    def _learn(st: GpuState, ts: float, perf: Finding | None) -> None:
        holding = perf is not None and perf.kind != "idle_allocated"
        frozen = holding or any(k in PERF_KINDS and k != "idle_allocated" for k in st.open)
        if st.sm is not None and st.pids:
            if not frozen:
                st.sm_base.update(ts, st.sm)
            base = st.sm_base.current(ts)
            st.sm_rel = st.sm / base.level if base.count >= 60 and base.level > 0.05 else 1.0
            st.sm_rel_ts = ts
        if frozen:
            return
        if ts - st.slow_ts < _SLOW_EVERY:
            return  # clock and temperature baselines move slowly: one sample in five seconds is plenty
        st.slow_ts = ts
        if st.clock is not None and st.sm is not None and st.sm >= 0.5:
            st.clock_base.update(ts, st.clock)
        if st.temp is not None:
            st.temp_base.update(ts, st.temp)

    def _lost_finding(self, st: GpuState, why: str) -> Finding:
        info = describe(79)
        return Finding("gpu_lost", "critical", XID, f"{st.where()} is lost ({info.name})",
                       [why, f"suggested action: {info.action}"], 0.0)

    def _stale(self, node: str, ts: float) -> list[Change]:
        out: list[Change] = []
        for st in self.gpus.values():
            if st.node != node or st.last_ts <= 0:
                continue
            silent = ts - st.last_ts
            if silent >= self.cfg.lost_after_s:
                why = f"no samples for {silent:.0f} s while other GPUs of {node} keep reporting"
                out.extend(self._apply(st, ts, [self._lost_finding(st, why)], complete=False))
        return out

    # ---- hysteresis ----
    def _apply(self, st: GpuState, ts: float, found: list[Finding], complete: bool) -> list[Change]:
        changes: list[Change] = []
        if "gpu_lost" in st.open and not any(f.kind == "gpu_lost" for f in found):
            found = []  # a lost GPU's other readings mean nothing until it is back
        true_kinds = set()
        for f in found:
            kind = f.kind
            true_kinds.add(kind)
            since = st.pending.setdefault(kind, ts)
            opened = st.open.get(kind)
            if opened is not None:
                anomaly = opened[0]
                st.open[kind] = (anomaly, ts)
                if SEVERITIES.index(f.severity) > SEVERITIES.index(anomaly.severity):
                    anomaly.severity = f.severity
                    anomaly.summary = f.summary
                    changes.append(Change("update", anomaly))
            elif ts - since >= f.hold:
                anomaly = Anomaly(f.kind, f.severity, st.node, st.gpu, f.metric, ts, f.summary, f.causes,
                                  gpu_index=st.gpu_index, namespace=st.namespace, pod=st.pod, service=st.service)
                others = [k for k in st.open if k != kind]
                if others:
                    anomaly.causes.append("also open on this GPU: " + ", ".join(sorted(others)))
                st.open[kind] = (anomaly, ts)
                changes.append(Change("open", anomaly))
        if complete:
            for kind in [k for k in st.pending if k not in true_kinds]:
                del st.pending[kind]
        for kind, (anomaly, last_true) in list(st.open.items()):
            if kind in true_kinds:
                continue
            wait = self.cfg.event_close_after_s if kind in EVENT_KINDS else self.cfg.close_after_s
            if kind == "gpu_lost" and not complete:
                continue  # closes only when the GPU reports again
            if ts - last_true >= wait:
                anomaly.end = ts
                del st.open[kind]
                st.pending.pop(kind, None)
                changes.append(Change("close", anomaly))
        return changes
