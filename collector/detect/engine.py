"""The streaming detection engine: records in, anomalies opened and closed out.

Why one engine for live and replay: the collector feeds it the records of each stored
batch, ``gpuwatch replay`` feeds it a file; both see the same answers because every
decision depends only on the records and the engine's own state, and time is the
records' ``ts`` (never the wall clock).

Per record the engine updates the GPU's state, asks each detector whether its condition
holds, and applies hysteresis: a condition must hold for the detector's ``hold`` seconds
to open an anomaly (``start`` is that sample's time) and be clear for ``close_after_s``
(one-off events: ``event_close_after_s``; a throughput drop, whose detector has its own
hysteresis: ``drop_close_after_s``) to close it. Specific explanations win over
generic ones on the same GPU: while a GPU is throttled, its lower SM activity is a
cause of the throttle anomaly, not a second anomaly; while it is lost, nothing else is
judged. Baselines are not updated while a performance condition holds, so an incident
does not become the new normal.

A lost GPU is reported on evidence only: the agent's ``gpu_lost`` event (NVML said so) or
XID 79. Silence is not evidence: samples come late when the agent's CPU budget stretches
its intervals, stop for a while when the agent restarts, and stop for a subset of a
node's GPUs when one Kafka partition stalls or moves to another collector replica; the
pipeline reports those (consumer stall and lag metrics), not the GPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from collector.detect import activity, errors, general, hbm, launch, memory, throttle
from collector.detect.anomaly import SEVERITIES, Anomaly, AnomalyKey, AnomalyKind
from collector.detect.baseline import RobustBaseline
from collector.detect.finding import DetectorConfig, Finding
from collector.detect.level import ActivityLevel
from collector.detect.peers import Groups
from collector.detect.remote import PeerSummary, Remote
from collector.detect.state import GpuState
from telemetry.clocks import BRAKE, POWER, THERMAL, ClockEventReason
from telemetry.keys import (
    CLOCKS_EVENT_REASONS,
    DRAM_ACTIVE,
    ECC_DBE_VOL_TOTAL,
    ECC_SBE_VOL_TOTAL,
    FB_FREE,
    FB_RESERVED,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    MEMORY_TEMP,
    PCIE_REPLAY_COUNTER,
    PCIE_RX_BYTES,
    PCIE_TX_BYTES,
    POWER_MGMT_LIMIT,
    POWER_USAGE,
    SM_ACTIVE,
    SM_CLOCK,
    XID_ERRORS,
)
from telemetry.records import EventRecord, GpuId, GpuRecord
from telemetry.xid import GPU_LOST

PERF_KINDS: frozenset[AnomalyKind] = frozenset({"thermal_throttle", "power_throttle", "straggler", "throughput_drop",
                                                "idle_allocated", "launch_bound"})
FREEZE_KINDS: frozenset[AnomalyKind] = frozenset({"thermal_throttle", "power_throttle", "straggler", "throughput_drop"})
_SW_POWER_CAP = int(ClockEventReason.SW_POWER_CAP)  # a plain int: tested on every record
_POWER_OR_BRAKE = POWER | BRAKE  # the bits without which throttle.power finds nothing
EVENT_KINDS: frozenset[AnomalyKind] = frozenset({"xid", "ecc_dbe", "ecc_sbe_rising", general.KIND})
_SLOW_EVERY = 5.0
_REPLICAS_EVERY = 30.0
_PEER_S = 30.0


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's detector state: its GPUs' states and when their services last changed."""

    node: str
    gpus: tuple[GpuState, ...]
    service_changed: dict[str, float]

    @property
    def last_ts(self) -> float:
        """The newest record folded into it."""
        return max((st.last_ts for st in self.gpus), default=0.0)


@dataclass(frozen=True, slots=True)
class Change:
    """An anomaly that opened, changed or closed at this record: the anomaly as it is now."""

    action: Literal["open", "close", "update"]
    anomaly: Anomaly


class AnomalyLog:
    """The anomalies a stream of changes opened, in order of opening, each as it stands now.

    Anomalies are frozen, so an update or a close is a new object; this keeps the list
    current by each anomaly's key (fingerprint and start): what a replay prints, what the
    benchmarks score. Open ones keep ``end`` None.
    """

    __slots__ = ("_at", "anomalies")

    def __init__(self) -> None:
        self.anomalies: list[Anomaly] = []
        self._at: dict[AnomalyKey, int] = {}

    def add(self, changes: Iterable[Change]) -> None:
        for change in changes:
            anomaly = change.anomaly
            if change.action == "open":
                self._at[anomaly.key] = len(self.anomalies)
                self.anomalies.append(anomaly)
            else:
                at = self._at.get(anomaly.key)
                if at is not None:
                    self.anomalies[at] = anomaly


def _event_ts(event: EventRecord) -> float:
    return event.ts


def _event_ts_node(event: EventRecord) -> tuple[float, str]:
    return event.ts, event.node


class DetectionEngine:
    """All detectors over a fleet's record stream; not thread-safe (one feeder)."""

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.cfg = config or DetectorConfig()
        self.gpus: dict[GpuId, GpuState] = {}
        self.pods = Groups()
        self.services = Groups()
        self.service_changed: dict[str, float] = {}  # when a replica last joined or restarted
        # when a service was last seen with replicas that exchange no data (activity.replicas): a server's;
        # and when that was last looked at
        self.replicated: dict[str, float] = {}
        self._replicas_ts: dict[str, float] = {}
        self.records = 0
        # the other collector replicas' GPUs of the services judged here (collector.detect.remote)
        self.remote = Remote(self.gpus, self.services, self.service_changed)

    # ---- input ----
    def feed(self, record: GpuRecord) -> list[Change]:
        """Judge one record; returns the anomalies it opened or closed."""
        self.records += 1
        ts = record.ts
        st = self.gpus.get(record.gpu)
        if st is None:
            st = self._new(record.node, record.gpu, record.gpu_index)
        if ts <= st.last_ts:
            # out of order or again for this GPU: the contract says the first does not happen; the
            # second does where a consumer re-reads past the state it took over (a restart)
            return []
        st.last_ts = ts
        if record.gpu_index is not None:
            st.gpu_index = record.gpu_index
        procs = record.processes
        if not (len(procs) == 1 and len(st.pids) == 1 and procs[0].pid in st.pids):
            self._identity(st, record, ts)  # (the common case, one process as before, without the call)
        m = record.metrics
        sm = m.get(SM_ACTIVE)
        util = m.get(GPU_UTIL)
        st.util = util
        if sm is not None and util is not None and record.processes:
            launch.smooth(st, ts, sm, util / 100.0)
        else:
            st.util_slow = -1.0
        st.sm = sm if sm is not None else (None if util is None else util / 100.0)
        st.clock = m.get(SM_CLOCK)
        st.temp = m.get(GPU_TEMP)
        st.reasons = int(m.get(CLOCKS_EVENT_REASONS, 0))
        rx = m.get(PCIE_RX_BYTES)
        tx = m.get(PCIE_TX_BYTES)
        st.pcie_rx = rx = rx or 0.0
        st.pcie = (tx or 0.0) + rx
        st.dram = m.get(DRAM_ACTIVE)
        if tx is not None:
            launch.learn_traffic(st, ts)  # (only where read: no reading is no evidence of no traffic)
        if not launch.copying(st) or rx < 0.5 * st.pcie:
            st.h2d_since = -1.0
        elif st.h2d_since < 0:
            st.h2d_since = ts
        st.evidence.observe(ts, m)
        return self._judge(st, ts, m)

    def feed_event(self, event: EventRecord) -> list[Change]:
        """An XID or GPU-lost event from the agent's event stream."""
        st = self.gpus.get(event.gpu)
        if st is None:
            st = self._new(event.node, event.gpu, None)
        finding: Finding | None = None
        if event.kind == "xid" and event.code:
            finding = errors.xid_finding(st, event.code, self.cfg)
        elif event.kind == "gpu_lost":
            finding = self._lost_finding(st, event.detail or "the agent lost the GPU")
        elif event.kind == "gpu_recovered":
            return self._recovered(st, event.ts)
        return self._apply(st, event.ts, [finding] if finding else [], complete=False)

    def feed_batch(self, records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> list[Change]:
        """A batch's records and events, each node's in time order: an event is judged before the
        node's first later record. Why: a consumer cuts its batches by size, and a batch's events
        judged after all of its records made an anomaly's start (and whether a lost GPU's readings
        counted) depend on where the batch ended; a replica that took a node over mid-run then
        disagreed with one that read the node whole."""
        out: list[Change] = []
        feed = self.feed
        if not events:  # the common case
            for record in records:
                out.extend(feed(record))
            return out
        waiting: dict[str, deque[EventRecord]] = {}
        for event in sorted(events, key=_event_ts):
            waiting.setdefault(event.node, deque()).append(event)
        for record in records:
            queue = waiting.get(record.node)
            while queue and queue[0].ts <= record.ts:
                out.extend(self.feed_event(queue.popleft()))
            out.extend(feed(record))
        # the events after every record of their node, in time order (and by node: the same order
        # whichever slice of a batch they end in, collector/batch_slices.py)
        for event in sorted((e for queue in waiting.values() for e in queue), key=_event_ts_node):
            out.extend(self.feed_event(event))
        return out

    def feed_all(self, records: Iterable[GpuRecord]) -> list[Change]:
        out: list[Change] = []
        for record in records:
            out.extend(self.feed(record))
        return out

    def open_anomalies(self) -> list[Anomaly]:
        return [a for st in self.gpus.values() for a, _ in st.open.values()]

    # ---- a node's state, handed between processes (collector.detect.checkpoint) ----
    def node_state(self, node: str) -> NodeState:
        """What the engine holds of ``node``: its GPUs' states and when their services last changed.

        A node is the unit because the agent keys its messages by node, so a node's GPUs
        (and the pods on them) move between collector replicas together."""
        gpus = tuple(st for st in self.gpus.values() if st.node == node)
        keys = {st.service_key for st in gpus if st.service_key is not None}
        return NodeState(node, gpus, {k: v for k, v in self.service_changed.items() if k in keys})

    def adopt(self, state: NodeState) -> list[Anomaly]:
        """Take ``state`` over (a restart, a partition moved here); returns its open anomalies.

        A GPU this engine already judges keeps its own state (it is newer than any saved one)."""
        opened: list[Anomaly] = []
        for st in state.gpus:
            if st.gpu in self.gpus:
                continue
            self.remote.drop(st.gpu)
            self.gpus[st.gpu] = st
            for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
                if key is not None:
                    groups.add(key, st)
            opened.extend(a for a, _ in st.open.values())
        for key, ts in state.service_changed.items():
            self.service_changed[key] = max(ts, self.service_changed.get(key, -1e18))
        return opened

    def forget(self, node: str) -> list[Anomaly]:
        """Drop ``node`` (its partition went to another replica); returns the anomalies it had open."""
        gone = [st for st in self.gpus.values() if st.node == node]
        for st in gone:
            del self.gpus[st.gpu]
            for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
                if key is not None:
                    groups.remove(key, st.gpu)
        return [a for st in gone for a, _ in st.open.values()]

    # ---- a service's replicas judged by other collector replicas ----
    def summaries(self) -> list[PeerSummary]:
        """What the other replicas need of this one's serving GPUs (publish every few seconds)."""
        return self.remote.summaries()

    def absorb(self, summaries: Iterable[PeerSummary]) -> int:
        """Another replica's summaries: its GPUs become peers here as shadows (never judged here)."""
        return self.remote.absorb(summaries)

    # ---- state ----
    def _new(self, node: str, gpu: GpuId, index: int | None) -> GpuState:
        """A GPU first judged here: a shadow of it (another replica judged it) gives way."""
        self.remote.drop(gpu)
        st = self.gpus[gpu] = GpuState(node, gpu, index)
        return st

    def _identity(self, st: GpuState, record: GpuRecord, ts: float) -> None:
        procs = record.processes
        if len(procs) == 1 and len(st.pids) == 1 and procs[0].pid in st.pids:
            return  # the common case, without building a set
        pids = frozenset(p.pid for p in procs)
        if pids == st.pids:
            return
        st.pids, st.pids_since = pids, ts
        st.level = ActivityLevel(ts)  # a new workload: its own normal
        st.pcie_work, st.pcie_ts = -1.0, -1e18
        # the clock a GPU holds at its power cap is the workload's (a heavier job's kernels draw more per
        # MHz and hold a lower clock at the same watts): a job that starts holding less there than the last
        # one did is capped as designed (an independently written fleet: 9 false throttles on a capped rack)
        st.cap_clock_base = RobustBaseline(1800.0)
        st.used_hist.clear()
        st.evidence.clear()
        st.leak = None
        st.watches.clear()
        who = next((p for p in procs if p.pod), procs[0] if procs else None)
        ns, pod, svc = (who.namespace, who.pod, who.service) if who else (None, None, None)
        if st.service_key is not None and pids:
            # a replica restarted: once it serves again, load moves to it (one that left without a new
            # process only makes the others busier, which explains no fall)
            self.service_changed[st.service_key] = ts
        if (ns, pod, svc) == (st.namespace, st.pod, st.service):
            return
        for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
            if key is not None:
                groups.remove(key, st.gpu)
        st.set_identity(ns, pod, svc)
        for groups, key in ((self.pods, st.pod_key), (self.services, st.service_key)):
            if key is not None:
                groups.add(key, st)
        if st.service_key is not None:
            self.service_changed[st.service_key] = ts  # a replica joined

    @staticmethod
    def _peers(groups: Groups, key: str | None, st: GpuState, ts: float) -> list[GpuState]:
        if key is None:
            return []
        # peers sampled at about the same time: a partition delivered minutes late replays its GPUs'
        # past while their peers are already at the present (and the other way round)
        return [p for p in groups.candidates(key, st) if p is not st and -_PEER_S < ts - p.last_ts < _PEER_S
                and p.pids]

    def _note_replicas(self, st: GpuState, ts: float) -> None:
        """Whether ``st``'s service has replicas that exchange no data, looked at every ``_REPLICAS_EVERY``
        seconds per service and remembered (``activity.REPLICATED_S``): a replica left alone for a while
        by its autoscaler is still a server's."""
        key = st.service_key
        if key is None or ts - self._replicas_ts.get(key, -1e18) < _REPLICAS_EVERY:
            return
        self._replicas_ts[key] = ts
        peers = [p for p in self._peers(self.services, key, st, ts) if p.pod_key != st.pod_key]
        if peers and activity.replicas(st, peers):
            self.replicated[key] = ts

    def _judge(self, st: GpuState, ts: float, m: dict[str, float]) -> list[Change]:
        """Every detector on one record. Why the guards before the calls: a replay judges tens of
        thousands of records a second, and on nearly all of them a detector's own first test
        (no new counter value, no throttle reason, not idle, not yet time to learn) says it
        cannot fire; each guard is that test, so the call and its arguments are skipped only
        where the detector would have returned None and changed nothing (or, for the ECC
        double-bit total and the power limit, only what the guard itself records)."""
        cfg = self.cfg
        found: list[Finding] = []
        f: Finding | None
        value = m.get(XID_ERRORS)
        if value is not None and int(value) != st.xid:  # errors.xid: the last XID changed
            f = errors.xid(st, value, ts, cfg)
            if f is not None:
                found.append(f)
        value = m.get(ECC_DBE_VOL_TOTAL)
        if value is not None:
            if value == st.dbe and ts - st.dbe_jump_ts > 0.0:
                st.dbe = value  # errors.ecc_dbe: no jump now, none at this very time
            else:
                f = errors.ecc_dbe(st, value, ts, cfg)
                if f is not None:
                    found.append(f)
        value = m.get(ECC_SBE_VOL_TOTAL)
        if value is not None:
            sbe = st.sbe_hist  # errors.ecc_sbe: judged again only when a new sample is kept
            f = st.sbe_finding if sbe and ts - sbe[-1][0] < errors.SBE_EVERY else errors.ecc_sbe(st, value, ts, cfg)
            if f is not None:
                found.append(f)
        value = m.get(PCIE_REPLAY_COUNTER)
        if value is not None:
            replays = st.replay_hist
            if not replays or ts - replays[-1][0] >= errors.REPLAY_EVERY:
                replays.append((ts, value))  # errors.pcie_replay's history (kept there too: then a no-op)
            if value != replays[0][1]:  # (else: no replays in the whole history)
                f = errors.pcie_replay(st, value, ts, cfg)
                if f is not None:
                    found.append(f)
        fb = st.used_hist
        if not fb or ts - fb[-1][0] >= memory.EVERY:  # the leak detector refits every few seconds only
            used = m.get(FB_USED)
            total = (used or 0.0) + m.get(FB_FREE, 0.0) + m.get(FB_RESERVED, 0.0)
            st.leak = memory.leak(st, ts, used, total, cfg)
        if st.leak is not None:
            found.append(st.leak)
        lv = st.level
        if st.sm is not None and st.pids:
            frozen = bool(lv.ep_ref) or (bool(st.open or st.pending) and not (
                FREEZE_KINDS.isdisjoint(st.open) and FREEZE_KINDS.isdisjoint(st.pending)))
            lv.update(ts, st.sm, m.get(FB_USED), learn=not frozen)
            st.sm_rel = lv.fast / lv.level if lv.established else 1.0
            self._note_replicas(st, ts)
        reasons, temp = st.reasons, st.temp
        perf = throttle.thermal(st, cfg) if reasons & THERMAL or (temp is not None and temp >= throttle.HOT_C) \
            else None
        if perf is None:
            limit_w = m.get(POWER_MGMT_LIMIT)
            if reasons & _POWER_OR_BRAKE:
                perf = throttle.power(st, cfg, m.get(POWER_USAGE), limit_w)
            elif limit_w is not None and limit_w > st.limit_max:
                st.limit_max = limit_w  # what throttle.power records before it finds no reason bit
        pod_peers = self._peers(self.pods, st.pod_key, st, ts) if st.pod_key is not None else []
        if perf is None:
            perf = activity.straggler(st, ts, cfg, pod_peers)
        if perf is None:
            if lv.ep_ref or lv.may_fall(cfg.drop_ratio, cfg.step_ratio):
                svc_key = st.service_key
                svc_peers = [p for p in self._peers(self.services, svc_key, st, ts) if p.pod_key != st.pod_key]
                unseen = not pod_peers and st.pod_key is not None and any(
                    p is not st and p.pids for p in self.pods.candidates(st.pod_key, st))
                replicated = svc_key is not None and ts - self.replicated.get(svc_key, -1e18) < activity.REPLICATED_S
                perf = activity.throughput(st, ts, cfg, pod_peers, svc_peers,
                                           self.service_changed.get(svc_key, -1e18) if svc_key else -1e18, unseen,
                                           replicated)
        else:
            # a more specific explanation holds; a fall it comes in on the way back from (an evaluation that
            # ended into a power cap) is still one of the job's dips
            if lv.ep_ref:
                lv.end_episode(ts, learn_dip=lv.ep_up >= 0, dip_max_s=activity.DIP_MAX_S, reported=lv.ep_reported)
            else:
                lv.end_episode()
        if perf is None and st.util_slow >= 0 and st.util_slow >= cfg.launch_util:
            perf = launch.launch_bound(st, cfg, st.dram)
        if perf is None:
            sm = st.sm
            if sm is not None and sm < cfg.idle_sm:  # activity.idle_allocated: an idle GPU only
                perf = activity.idle_allocated(st, cfg)
        elif perf.kind in ("thermal_throttle", "power_throttle"):
            self._add_activity_cause(st, perf)
        if perf is not None:
            found.append(perf)
        hot = hbm.observe(st, ts, m.get(MEMORY_TEMP)) \
            if ts - st.hbm.last_ts >= hbm.EVERY or st.hbm.finding is not None else None
        if hot is not None:
            found.append(hot)
        if cfg.metrics and st.pids and not found and ts - st.watch_ts >= general.EVERY:
            # (not while another finding explains the metrics better)
            unusual = general.observe(st, ts, m, cfg.metrics)
            if unusual is not None:
                found.append(unusual)
        if ts - st.slow_ts >= _SLOW_EVERY:
            self._learn(st, ts, perf, m.get(POWER_USAGE), m.get(POWER_MGMT_LIMIT))
        if not found and not st.pending and not st.open:
            return []  # the common case, without the call
        return self._apply(st, ts, found, complete=True)

    @staticmethod
    def _add_activity_cause(st: GpuState, perf: Finding) -> None:
        lv = st.level
        if st.sm is not None and lv.established and lv.fast < 0.9 * lv.level:
            perf.causes.append(f"SM activity {lv.fast:.2f} vs working level {lv.level:.2f}: the throttle costs "
                               f"throughput")

    @staticmethod
    def _learn(st: GpuState, ts: float, perf: Finding | None, power_w: float | None, limit_w: float | None) -> None:
        """Clock and temperature baselines, unless a performance condition holds."""
        if ts - st.slow_ts < _SLOW_EVERY:
            return  # clock and temperature baselines move slowly: one sample in five seconds is plenty
        if (perf is not None and perf.kind in FREEZE_KINDS) or any(k in FREEZE_KINDS for k in st.open):
            return
        st.slow_ts = ts
        if st.clock is not None and st.sm is not None and st.sm >= 0.2:
            st.clock_base.update(ts, st.clock)
            if st.reasons & _SW_POWER_CAP and throttle.at_limit(st, power_w, limit_w):
                st.cap_clock_base.update(ts, st.clock)
                if st.temp is not None:
                    st.cap_temp_base.update(ts, st.temp)
        if st.temp is not None:
            st.temp_base.update(ts, st.temp)

    def _lost_finding(self, st: GpuState, why: str) -> Finding:
        return Finding(GPU_LOST.kind, GPU_LOST.severity, XID_ERRORS, f"{st.where()} is lost ({GPU_LOST.meaning})",
                       [why, f"suggested action: {GPU_LOST.action}"], 0.0)

    def _recovered(self, st: GpuState, ts: float) -> list[Change]:
        opened = st.open.pop("gpu_lost", None)
        st.pending.pop("gpu_lost", None)
        if opened is None:
            return []
        return [Change("close", replace(opened[0], end=ts))]

    # ---- hysteresis ----
    def _apply(self, st: GpuState, ts: float, found: list[Finding], complete: bool) -> list[Change]:
        if not found and not st.pending and not st.open:
            return []  # the common case
        changes: list[Change] = []
        if "gpu_lost" in st.open and not any(f.kind == "gpu_lost" for f in found):
            found = []  # a lost GPU's other readings mean nothing until it is back
        true_kinds: set[AnomalyKind] = set()
        for f in found:
            kind = f.kind
            true_kinds.add(kind)
            since = st.pending.setdefault(kind, ts)
            opened = st.open.get(kind)
            if opened is not None:
                anomaly = opened[0]
                st.open[kind] = (anomaly, ts)
                if SEVERITIES.index(f.severity) > SEVERITIES.index(anomaly.severity):
                    anomaly = replace(anomaly, severity=f.severity, summary=f.summary)
                    st.open[kind] = (anomaly, ts)
                    changes.append(Change("update", anomaly))
            elif ts - since >= f.hold:
                causes = tuple(f.causes)
                others = [k for k in st.open if k != kind]
                if others:
                    causes += ("also open on this GPU: " + ", ".join(sorted(others)),)
                anomaly = Anomaly(f.kind, f.severity, st.node, st.gpu, f.metric, ts, f.summary, causes,
                                  gpu_index=st.gpu_index, namespace=st.namespace, pod=st.pod, service=st.service)
                st.open[kind] = (anomaly, ts)
                changes.append(Change("open", anomaly))
        if complete:
            for kind in [k for k in st.pending if k not in true_kinds]:
                del st.pending[kind]
        for kind, (anomaly, last_true) in list(st.open.items()):
            if kind in true_kinds:
                continue
            wait = self.cfg.event_close_after_s if kind in EVENT_KINDS else \
                self.cfg.drop_close_after_s if kind == "throughput_drop" else self.cfg.close_after_s
            if kind == "gpu_lost" and not complete:
                continue  # closes only when the GPU reports again
            if ts - last_true >= wait:
                del st.open[kind]
                st.pending.pop(kind, None)
                changes.append(Change("close", replace(anomaly, end=ts)))
        return changes
