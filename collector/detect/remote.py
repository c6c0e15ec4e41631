"""A service's replicas that another collector replica judges: what one replica tells the others.

Why: the agent keys its messages by node, so a pod's GPUs reach one collector replica, but a
service's replicas run on many nodes and so are read by many collector replicas. A serving
replica's step is judged against its service's other replicas (did they step down with it,
did one rise as it fell, did a replica just join), and a replica that sees only the peers on
its own partitions sees few of them: on the generated fleets, judged one engine per node, the
false ``throughput_drop`` findings went from 2 to 13 over 6 seeds (docs/benchmarks.md).

So each replica publishes, every few seconds, a :class:`PeerSummary` of each of its GPUs that
serve a named service: exactly what the service-peer judgements read of a peer (its identity
and processes, when they started, whether it is in a fall, its slow mean, noise and step
anchor, whether it is a steady job, and its 5-second block means), and every replica keeps a
*shadow* of the other replicas' GPUs of the services it judges. A shadow is a
:class:`~collector.detect.state.GpuState` whose :class:`~collector.detect.level.ActivityLevel`
holds those values, so the detectors read it as they read a local peer and pick it in a
group's sample as they would (``collector.detect.peers``). A shadow is never judged, stored
or checkpointed: its owner does that.

What a summary costs: the blocks closed since the last one (about one per 5 s), and every
``FULL_EVERY``-th time all of a GPU's recent blocks, so a replica that starts, or that gets a
first member of a service, has the blocks the step anchor needs within a minute.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from collector.detect.level import ActivityLevel
from collector.detect.peers import Groups
from collector.detect.state import GpuState
from telemetry.records import GpuId

FULL_EVERY = 30  # every this many summaries of a GPU carry all its recent blocks, not only the new ones
STALE_S = 600.0  # a shadow whose owner has said nothing of it for this long (in record time) is dropped
VERSION = 1


@dataclass(frozen=True, slots=True)
class PeerSummary:
    """One GPU as the replica that judges it sees it; ``pids`` empty: it no longer serves."""

    gpu: GpuId
    node: str
    index: int | None
    namespace: str | None
    pod: str | None
    service: str | None
    pids: tuple[int, ...]
    pids_since: float
    last_ts: float
    level_since: float  # when its level began (a new process set starts a new one)
    steady: bool | None
    ep_ref: float  # the level of the fall it is in (0: none)
    slow: float
    jitter: float
    anchor: float
    rebase_ts: float
    incident: tuple[float, float]
    blocks: tuple[tuple[float, float], ...]  # (end, mean SM) of 5-second blocks, oldest first


def summarise(st: GpuState, after: float) -> PeerSummary:
    """``st`` as a peer reads it, with its blocks that ended after ``after``."""
    lv = st.level
    recent = lv.recent
    new: list[tuple[float, float]] = []
    for block in reversed(recent):
        if block[0] <= after:
            break
        new.append(block)
    new.reverse()
    return PeerSummary(st.gpu, st.node, st.gpu_index, st.namespace, st.pod, st.service, tuple(sorted(st.pids)),
                       st.pids_since, st.last_ts, lv.since, lv.steady, lv.ep_ref, lv.slow, lv.jitter,
                       lv.peek_anchor(), lv.rebase_ts, lv.incident, tuple(new))


def gone(st: GpuState) -> PeerSummary:
    """``st`` no longer serves its service (its process left): peers stop counting it at once."""
    return PeerSummary(st.gpu, st.node, st.gpu_index, None, None, None, (), st.pids_since, st.last_ts, 0.0, None,
                       0.0, 0.0, 0.0, 0.0, 0.0, (0.0, 0.0), ())


# ---- the wire: one JSON object per replica and publish ----
def encode(replica: str, summaries: Iterable[PeerSummary]) -> bytes:
    gpus = [[s.gpu, s.node, s.index, s.namespace, s.pod, s.service, list(s.pids), s.pids_since, s.last_ts,
             s.level_since, s.steady, s.ep_ref, s.slow, s.jitter, s.anchor, s.rebase_ts, list(s.incident),
             [list(b) for b in s.blocks]] for s in summaries]
    return orjson.dumps({"v": VERSION, "replica": replica, "gpus": gpus})


_FIELDS = ("gpu", "node", "index", "namespace", "pod", "service", "pids", "pids_since", "last_ts", "level_since",
           "steady", "ep_ref", "slow", "jitter", "anchor", "rebase_ts", "incident", "blocks")


class BadSummary(ValueError):
    """A peers message that cannot be read; its text names the field."""


def _text(v: Any, where: str, optional: bool = True) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v or len(v) > 512:
        raise BadSummary(f"{where}: not a name ({v!r:.40})")
    return v


_NUMS = ("pids_since", "last_ts", "level_since", "ep_ref", "slow", "jitter", "anchor", "rebase_ts")


def _finite(v: Any) -> bool:
    return (type(v) is float and math.isfinite(v)) or type(v) is int


def _one(row: Any, at: str) -> PeerSummary:
    if type(row) is not list or len(row) != len(_FIELDS):
        raise BadSummary(f"{at}: not a list of {len(_FIELDS)} fields")
    (gpu, node, index, namespace, pod, service, pids, pids_since, last_ts, level_since, steady, ep_ref, slow,
     jitter, anchor, rebase_ts, incident, blocks) = row
    nums = (pids_since, last_ts, level_since, ep_ref, slow, jitter, anchor, rebase_ts)
    if not all(_finite(v) for v in nums):
        bad = next(i for i, v in enumerate(nums) if not _finite(v))
        raise BadSummary(f"{at}.{_NUMS[bad]}: not a finite number ({nums[bad]!r:.40})")
    if index is not None and type(index) is not int:
        raise BadSummary(f"{at}.index: not an integer")
    if type(pids) is not list or any(type(p) is not int for p in pids):
        raise BadSummary(f"{at}.pids: not a list of integers")
    if steady is not None and type(steady) is not bool:
        raise BadSummary(f"{at}.steady: not true, false or null")
    if type(incident) is not list or len(incident) != 2 or not all(_finite(v) for v in incident):
        raise BadSummary(f"{at}.incident: not a pair of numbers")
    if type(blocks) is not list:
        raise BadSummary(f"{at}.blocks: not a list")
    pairs: list[tuple[float, float]] = []
    for i, b in enumerate(blocks):
        if type(b) is not list or len(b) != 2 or not (_finite(b[0]) and _finite(b[1])):
            raise BadSummary(f"{at}.blocks[{i}]: not a pair of numbers")
        pairs.append((float(b[0]), float(b[1])))
    gpu, node = _text(gpu, f"{at}.gpu", False), _text(node, f"{at}.node", False)
    assert gpu is not None and node is not None
    return PeerSummary(GpuId(gpu), node, index, _text(namespace, f"{at}.namespace"), _text(pod, f"{at}.pod"),
                       _text(service, f"{at}.service"), tuple(pids), float(pids_since), float(last_ts),
                       float(level_since), steady, float(ep_ref), float(slow), float(jitter), float(anchor),
                       float(rebase_ts), (float(incident[0]), float(incident[1])), tuple(pairs))


def decode(value: bytes, wanted: set[str] | None = None) -> tuple[str, list[PeerSummary]]:
    """The publishing replica and its summaries; :class:`BadSummary` names what is wrong. With
    ``wanted`` (service keys, :meth:`Remote.wanted`), the summaries of other services are skipped
    unread beyond their name: a replica reads every other replica's message, and most of a large
    fleet's services have no replica here."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise BadSummary(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadSummary("not a JSON object")
    if doc.get("v") != VERSION:
        raise BadSummary(f"v: version {doc.get('v')!r:.20}, this build reads {VERSION}")
    replica = _text(doc.get("replica"), "replica", False)
    rows = doc.get("gpus")
    if not isinstance(rows, list):
        raise BadSummary("gpus: not a list")
    assert replica is not None
    out = []
    for i, row in enumerate(rows):
        if wanted is not None and type(row) is list and len(row) == len(_FIELDS) and row[6] \
                and f"{row[3]}/{row[5]}" not in wanted:
            continue  # (a row that says its GPU left is read whatever its service: it names none)
        out.append(_one(row, f"gpus[{i}]"))
    return replica, out


# ---- both ends, beside an engine ----
class Remote:
    """What this engine tells other replicas (:meth:`summaries`) and the shadows of theirs
    (:meth:`absorb`); ``local``, ``services`` and ``changed`` are the engine's own."""

    def __init__(self, local: dict[GpuId, GpuState], services: Groups, changed: dict[str, float]) -> None:
        self.local, self.services, self.changed = local, services, changed
        self.shadows: dict[GpuId, GpuState] = {}
        self._sent: dict[GpuId, tuple[float, int]] = {}  # last block end sent, summaries sent
        self._newest = 0.0

    def summaries(self) -> list[PeerSummary]:
        """This engine's GPUs that serve a named service (and those that stopped since the last call)."""
        out: list[PeerSummary] = []
        sent = self._sent
        seen: set[GpuId] = set()
        for st in self.local.values():
            if st.service is None or not st.pids:
                continue
            seen.add(st.gpu)
            after, n = sent.get(st.gpu, (-math.inf, 0))
            s = summarise(st, -math.inf if n % FULL_EVERY == 0 else after)
            out.append(s)
            sent[st.gpu] = (s.blocks[-1][0] if s.blocks else after, n + 1)
        for gpu in [g for g in sent if g not in seen]:
            del sent[gpu]
            left = self.local.get(gpu)
            if left is not None:  # still judged here, but no longer a replica of a service
                out.append(gone(left))
        return out

    def wanted(self) -> set[str]:
        """The services with a replica judged here: only their other replicas are shadowed."""
        return {st.service_key for st in self.local.values() if st.service is not None and st.service_key}

    def absorb(self, summaries: Iterable[PeerSummary]) -> int:
        """Take other replicas' summaries; returns how many shadows they updated. A GPU judged here
        is not shadowed; nor is one of a service with no replica here (nothing compares with it)."""
        local = self.local
        wanted = self.wanted()
        n = 0
        for s in summaries:
            if s.gpu in local:
                continue
            st = self.shadows.get(s.gpu)
            if st is not None and s.last_ts < st.last_ts:
                continue  # an older owner's last word, after the new owner's
            if not s.pids:
                if st is not None:
                    self.drop(s.gpu)
                continue
            key = f"{s.namespace}/{s.service}" if s.service else None
            if key is None or key not in wanted:
                if st is not None:
                    self.drop(s.gpu)
                continue
            if st is None or st.service_key != key:
                if st is not None:
                    self.drop(s.gpu)
                st = GpuState(s.node, s.gpu, s.index)
                st.set_identity(s.namespace, s.pod, s.service)
                self.shadows[s.gpu] = st
                self.services.add(key, st)
            if s.pids_since != st.pids_since:
                # a replica joined or restarted: once it serves, load moves to it (engine._identity)
                self.changed[key] = max(s.pids_since, self.changed.get(key, -1e18))
            _refresh(st, s)
            self._newest = max(self._newest, s.last_ts)
            n += 1
        for gpu in [g for g, st in self.shadows.items() if self._newest - st.last_ts > STALE_S]:
            self.drop(gpu)
        return n

    def drop(self, gpu: GpuId) -> None:
        """Forget the shadow of ``gpu`` (it left, went stale, or is judged here now)."""
        st = self.shadows.pop(gpu, None)
        if st is not None and st.service_key is not None and self.services.members.get(st.service_key, {}).get(
                gpu) is st:
            self.services.remove(st.service_key, gpu)


def _refresh(st: GpuState, s: PeerSummary) -> None:
    st.node, st.gpu_index, st.last_ts = s.node, s.index, s.last_ts
    st.pids, st.pids_since = frozenset(s.pids), s.pids_since
    lv = st.level
    if lv.since != s.level_since:
        lv = st.level = ActivityLevel(s.level_since)
    lv.steady, lv.ep_ref, lv.slow, lv.jitter = s.steady, s.ep_ref, s.slow, s.jitter
    lv._anchor, lv._anchor_ts = s.anchor, s.last_ts
    lv.rebase_ts, lv.incident = s.rebase_ts, s.incident
    lv._at = (-1.0, 0.0)
    recent = lv.recent
    last = recent[-1][0] if recent else -math.inf
    for block in s.blocks:
        if block[0] > last:
            recent.append(block)
            last = block[0]
