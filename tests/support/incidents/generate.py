"""A generator of fleet traces with labelled GPU incidents and hard negatives (the tuning set).

Why our own generator: no public data set labels GPU incidents. Nodes alternate between
two kinds, each running what real clusters run (GPU-FACTS.md):

* **A nodes**: a 4-GPU training pod (SM activity ~0.91 at the power cap, evaluation pauses
  of the whole pod every 30 min for 2 min, a checkpoint every hour), two replicas of a
  serving service whose traffic rises and falls together, a batch GPU (jobs start, ramp
  memory, stop, and leave the GPU empty between jobs) and a notebook (idle up to 8
  minutes at a time).
* **B nodes**: four replicas of a chat service whose demand is *not* balanced: each
  follows its own wave, out of phase with the others, with bursts and slow drifts over
  tens of minutes; an autoscaler adds and removes two of them (the others' load halves
  and doubles); rollouts drain a replica, restart it, and sometimes bring it back as a
  canary with a sixth of the traffic. Two single-GPU fine-tuning jobs (start-up seconds
  and minutes of loading at low activity, evaluation dips of varying depth and length,
  checkpoints at near-zero SM activity with heavy PCIe traffic, jobs ending and
  restarting). Two tool GPUs that switch between compute, memory-bound (DRAM ~0.85) and
  copy-bound (high PCIe, utilisation up, SM activity near zero) phases.
* **Every node**: the pipeline's silences, which are not GPU faults: agent restarts (the
  whole node silent for up to 90 s), a stalled partition (some GPUs' samples arrive up to
  4 minutes late, in a burst), and a CPU budget that stretches sampling to 15-60 s.

Those are the hard negatives. Incidents of every kind are injected at random times and
labelled ``{kind, node, gpu, start, end}``; ``start`` is when a perfect detector could
know (a slow drift: when it has fallen 40%; an idle allocated GPU and a launch-bound
phase: after the wait the detector is asked to observe). A lost GPU is reported by its
agent, as the real agent does (an event when NVML says the GPU is lost, sometimes XID 79
first), so :meth:`Fleet.records` yields :class:`~telemetry.records.EventRecord` items too.

Everything is a pure function of the seed, so a trace can be regenerated bit for bit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from telemetry.records import EventRecord, GpuRecord, ProcessRecord

KINDS = ("thermal_throttle", "power_throttle", "throughput_drop", "straggler", "memory_leak", "xid", "ecc_dbe",
         "ecc_sbe_rising", "pcie_replay_storm", "idle_allocated", "gpu_lost", "launch_bound", "metric_anomaly")
ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "train": ("thermal_throttle", "power_throttle", "straggler", "memory_leak", "xid", "ecc_dbe",
              "ecc_sbe_rising", "pcie_replay_storm", "gpu_lost", "hbm_heat", "hbm_heat"),
    "serve": ("thermal_throttle", "power_throttle", "throughput_drop", "throughput_drop", "memory_leak", "xid",
              "ecc_dbe", "pcie_replay_storm", "gpu_lost"),
    "batch": ("xid", "ecc_sbe_rising", "pcie_replay_storm"),
    "notebook": ("idle_allocated", "idle_allocated", "xid"),
    "chat": ("throughput_drop", "throughput_drop", "thermal_throttle", "memory_leak", "xid", "gpu_lost"),
    "finetune": ("throughput_drop", "drift", "launch_bound", "xid", "memory_leak", "ecc_dbe"),
    "tools": ("launch_bound", "launch_bound", "xid", "pcie_replay_storm", "thermal_throttle"),
}
ROLES_A = ("train", "train", "train", "train", "serve", "serve", "batch", "notebook")
ROLES_B = ("chat", "chat", "chat", "chat", "finetune", "finetune", "tools", "tools")
XID_CODES = (13, 31, 43, 63, 64, 94, 95)
MEM_TOTAL = 143771.0
IDLE_AFTER = 600.0
LAUNCH_AFTER = 90.0  # the launch-bound detector's wait (DetectorConfig.launch_hold_s)
MIB = 2.0 ** 20


@dataclass(frozen=True, slots=True)
class Incident:
    kind: str
    node: str
    gpu: str
    start: float  # when a perfect detector could first know
    end: float
    onset: float  # when the fault itself began
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Gpu:
    node: str
    node_no: int
    index: int
    uuid: str
    role: str
    rng: random.Random
    incidents: list[Incident] = field(default_factory=list)
    segments: list[tuple[float, float, str, int, float]] = field(default_factory=list)  # chat/finetune life
    sbe: float = 0.0
    dbe: float = 0.0
    replay: float = 0.0
    xid: int = 0
    leak_mib: float = 0.0
    wave: tuple[float, float, float] = (1200.0, 0.0, 1.0)  # chat: period, phase, share weight
    drifts: list[tuple[float, float, float]] = field(default_factory=list)  # chat: (start, length, depth)
    bursts: list[tuple[float, float, float]] = field(default_factory=list)  # chat: (start, length, height)
    job: dict[str, float] = field(default_factory=dict)  # finetune: the current job's parameters


@dataclass(slots=True)
class _Work:
    """What a GPU does at one second when nothing is wrong."""

    sm: float
    mem: float
    pid: int | None
    pod: str
    service: str
    ns: str
    util: float | None = None  # GPU utilisation %, default from SM activity
    dram: float | None = None
    pcie: float = 12.0 * MIB  # bytes/s, both directions


def _duration(kind: str, rng: random.Random) -> float:
    if kind in ("xid", "ecc_dbe"):
        return 1.0
    if kind == "idle_allocated":
        return IDLE_AFTER + rng.uniform(240, 600)
    if kind == "launch_bound":
        return LAUNCH_AFTER + rng.uniform(180, 360)
    if kind == "gpu_lost":
        return rng.uniform(180, 480)
    if kind == "drift":
        return rng.uniform(420, 660)
    if kind == "hbm_heat":
        return rng.uniform(600, 1200)
    return rng.uniform(180, 420)


class Fleet:
    """``nodes`` nodes of 8 GPUs over ``hours`` at 1 Hz; iterate :meth:`records`, read :attr:`incidents`."""

    def __init__(self, nodes: int = 4, hours: float = 3.0, seed: int = 1, t0: float = 1_764_489_600.0) -> None:
        self.t0 = t0
        self.seconds = int(hours * 3600)
        self.rng = random.Random(seed)
        self.gpus: list[_Gpu] = []
        for n in range(nodes):
            roles = ROLES_A if n % 2 == 0 else ROLES_B
            for i, role in enumerate(roles):
                uid = f"GPU-{seed:04x}{n:04x}-{i:04x}-4000-8000-{self.rng.getrandbits(48):012x}"
                self.gpus.append(_Gpu(f"gpu-node-{n:02d}", n, i, uid, role, random.Random(self.rng.getrandbits(32))))
        self.eval_phase = {n: self.rng.uniform(0, 1800) for n in range(nodes)}
        self.silences: dict[int, list[tuple[float, float, str, frozenset[int]]]] = {}
        for n in range(nodes):
            self.silences[n] = self._silences(n)
        self.pod_stalls: dict[int, tuple[float, float, float]] = {}
        self.incidents: list[Incident] = []
        for g in self.gpus:
            if g.role == "chat":
                self._chat_life(g)
            elif g.role == "finetune":
                self._finetune_life(g)
        for n in range(0, nodes, 2):
            self._pod_stall(n)
        for g in self.gpus:
            self._schedule(g)

    # ---- the pipeline's silences (hard negatives) ----
    def _silences(self, n: int) -> list[tuple[float, float, str, frozenset[int]]]:
        rng = random.Random(self.rng.getrandbits(32))
        out: list[tuple[float, float, str, frozenset[int]]] = []
        t = rng.uniform(600, 2400)
        while t < self.seconds - 600:
            what = rng.choice(("restart", "partition", "stretch"))
            if what == "restart":
                length, gpus = rng.uniform(15, 90), frozenset(range(8))
            elif what == "partition":
                length, gpus = rng.uniform(60, 240), frozenset(rng.sample(range(8), rng.randint(2, 4)))
            else:
                length, gpus = rng.uniform(300, 600), frozenset(range(8))
            out.append((t, t + length, what, gpus))
            t += length + rng.uniform(1800, 4200)
        return out

    def _quiet(self, g: _Gpu, a: float, b: float) -> bool:
        """No silence touches [a, b] on this GPU (incidents are scheduled around them)."""
        return all(b < s0 - 60 or a > s1 + 60 or g.index not in gpus for s0, s1, _, gpus in self.silences[g.node_no])

    # ---- lives of the B-node workloads ----
    def _chat_life(self, g: _Gpu) -> None:
        rng = g.rng
        g.wave = (rng.uniform(900, 2400), rng.uniform(0, 2 * math.pi), rng.uniform(0.7, 1.2))
        t = rng.uniform(0, 3600)
        while t < self.seconds:
            length = rng.uniform(1200, 2400)
            g.drifts.append((t, length, rng.uniform(0.4, 0.65)))
            t += length + rng.uniform(1800, 5400)
        t = rng.uniform(0, 300)
        while t < self.seconds:
            g.bursts.append((t, rng.uniform(20, 60), rng.uniform(0.1, 0.25)))
            t += rng.expovariate(1 / 300.0) + 60
        segs: list[tuple[float, float, str, int, float]] = []
        gen = 0
        t = 0.0
        autoscaled = g.index >= 2
        while t < self.seconds:
            if autoscaled:
                on = rng.uniform(1800, 3000)
                off = rng.uniform(1200, 2400)
                segs.append((t, t + on, "serve", gen, 1.0))
                segs.append((t + on, t + on + 60, "drain", gen, 1.0))
                segs.append((t + on + 60, t + on + off, "absent", gen, 0.0))
                gen += 1
                segs.append((t + on + off, t + on + off + rng.uniform(40, 90), "load", gen, 0.0))
                t = segs[-1][1]
            else:
                run = rng.uniform(2400, 4800)
                segs.append((t, t + run, "serve", gen, 1.0))
                segs.append((t + run, t + run + 60, "drain", gen, 1.0))
                segs.append((t + run + 60, t + run + 90, "absent", gen, 0.0))
                gen += 1
                load_end = t + run + 90 + rng.uniform(40, 90)
                segs.append((t + run + 90, load_end, "load", gen, 0.0))
                t = load_end
                if rng.random() < 0.5:  # a canary with a sixth of the traffic, promoted later
                    canary = rng.uniform(900, 1500)
                    segs.append((t, t + canary, "serve", gen, 1 / 6))
                    t += canary
        g.segments = segs

    def _finetune_life(self, g: _Gpu) -> None:
        rng = g.rng
        segs: list[tuple[float, float, str, int, float]] = []
        t = rng.uniform(0, 600)
        gen = 0
        while t < self.seconds:
            length = rng.uniform(3000, 5400)
            segs.append((t, t + length, "job", gen, rng.uniform(0.75, 0.95)))
            gen += 1
            t += length + rng.uniform(60, 180)
        g.segments = segs

    @staticmethod
    def _segment(g: _Gpu, t: float) -> tuple[float, float, str, int, float] | None:
        for seg in g.segments:
            if seg[0] <= t < seg[1]:
                return seg
        return None

    def _pod_stall(self, n: int) -> None:
        """A job-wide input stall of node ``n``'s training pod (all four GPUs), labelled on each."""
        rng = random.Random(self.rng.getrandbits(32))
        pod = [g for g in self.gpus if g.node_no == n and g.role == "train"]
        for _ in range(50):
            onset = rng.uniform(2400, self.seconds - 900)
            dur = rng.uniform(300, 480)
            span = range(int(onset) - 60, int(onset + dur) + 60, 5)
            if any((x + self.eval_phase[n]) % 1800.0 >= 1680.0 or (x + 600) % 3600.0 < 30.0 for x in span):
                continue  # not into an evaluation pause or a checkpoint
            if not all(self._quiet(g, onset, onset + dur) for g in pod):
                continue
            factor = rng.uniform(0.25, 0.5)
            self.pod_stalls[n] = (self.t0 + onset, self.t0 + onset + dur, factor)
            for g in pod:
                inc = Incident("throughput_drop", g.node, g.uuid, self.t0 + onset, self.t0 + onset + dur,
                               self.t0 + onset, {"factor": factor, "pod": True})
                g.incidents.append(inc)
                self.incidents.append(inc)
            return

    def _fits(self, g: _Gpu, kind: str, a: float, b: float) -> bool:
        """Whether an incident can happen to this GPU's workload over [a, b] (seconds from t0)."""
        if not self._quiet(g, a, b):
            return False
        if any(not (b + 300 < i.onset - self.t0 or a > i.end - self.t0 + 300) for i in g.incidents):
            return False
        # capacity lost shows only while there is work to do: a replica at a fifth of its
        # capacity keeps up with its trickle of requests on a slower GPU too
        if g.role in ("chat", "serve") and kind == "throughput_drop":
            work = self._chat if g.role == "chat" else self._serve
            if min(work(g, x, 0.5).sm for x in range(int(a), int(b), 15)) < 0.3:
                return False
        if g.role == "chat":  # while it serves in full, and no replica of its node comes or goes
            seg = self._segment(g, a)
            if seg is None or seg[2] != "serve" or seg[4] != 1.0 or b + 60 >= seg[1] or a <= seg[0] + 600:
                return False
            return not any(a - 300 <= edge <= b + 60 for p in self.gpus if p.node_no == g.node_no and p.role == "chat"
                           for s0, s1, *_ in p.segments for edge in (s0, s1))
        if g.role == "finetune":
            seg = self._segment(g, a)
            if seg is None or b + 60 >= seg[1] or a < seg[0] + 900:
                return False
            if kind in ("throughput_drop", "drift", "launch_bound"):
                return not any(self._ft_event(g, seg, t) for t in range(int(a), int(b) + 60, 10))
            return True
        if kind == "hbm_heat" and a < 4500:
            return False  # the general-purpose detector learns half an hour of work first
        if g.role == "train" and g.node_no in self.pod_stalls:
            s0, s1, _ = self.pod_stalls[g.node_no]
            return b + self.t0 < s0 - 300 or a + self.t0 > s1 + 300
        return True

    def _schedule(self, g: _Gpu) -> None:
        rng = g.rng
        t = 900.0 + rng.uniform(0, 600)
        last_code = 0
        tries = 0
        while tries < 200:
            tries += 1
            kind = rng.choice(ROLE_KINDS[g.role])
            dur = _duration(kind, rng)
            if t + dur + 300 > self.seconds:
                break
            if not self._fits(g, kind, t, t + dur):
                t += rng.uniform(60, 300)
                continue
            onset = self.t0 + t
            start = onset
            detail: dict[str, Any] = {}
            if kind == "idle_allocated":
                start = onset + IDLE_AFTER
            elif kind == "launch_bound":
                start = onset + LAUNCH_AFTER
            elif kind == "xid":  # the XID field holds the last code: a repeat of the same one would not show
                detail["code"] = rng.choice([c for c in XID_CODES if c != last_code])
                last_code = detail["code"]
            elif kind == "gpu_lost":
                detail["xid79"] = rng.random() < 0.5
            elif kind == "hbm_heat":  # HBM runs hotter at the same load (cooling), not yet throttling
                detail["ramp"], detail["delta"] = rng.uniform(120, 300), rng.uniform(10.0, 20.0)
                start = onset + detail["ramp"] * 7.0 / detail["delta"]
            elif kind == "drift":
                detail["ramp"] = rng.uniform(120, 360)
                detail["floor"] = rng.uniform(0.35, 0.5)
                start = onset + detail["ramp"] * 0.4 / (1.0 - detail["floor"])  # when it has fallen 40%
            # how bad the fault is varies, as it does in the field
            detail["factor"] = {"thermal_throttle": rng.uniform(0.6, 0.85), "power_throttle": rng.uniform(0.5, 0.8),
                                "throughput_drop": rng.uniform(0.35, 0.55), "straggler": rng.uniform(0.5, 0.68),
                                "memory_leak": rng.uniform(10.0, 60.0)}.get(kind, 1.0)
            if kind == "throughput_drop" and g.role == "finetune":
                detail["factor"] = rng.uniform(0.2, 0.5)  # an input stall: bursty, far below the level
            label = {"drift": "throughput_drop", "hbm_heat": "metric_anomaly"}.get(kind, kind)
            inc = Incident(label, g.node, g.uuid, start, onset + dur, onset, {"shape": kind, **detail})
            g.incidents.append(inc)
            self.incidents.append(inc)
            t += dur + rng.uniform(900, 1500)  # the GPU settles (and baselines re-learn) in between

    # ---- normal behaviour (the hard negatives live here) ----
    def _train(self, g: _Gpu, t: float, noise: float) -> _Work:
        cycle = (t + self.eval_phase[g.node_no]) % 1800.0
        sm = 0.915 + 0.02 * (noise - 0.5)
        if cycle >= 1800.0 - 120.0:  # evaluation pause: every GPU of the pod at once
            sm = 0.30 + 0.05 * noise
        if (t + 600) % 3600.0 < 30.0:  # checkpoint
            sm = 0.05 + 0.03 * noise
        n = g.node_no
        return _Work(sm, 0.83 * MEM_TOTAL, 10000 + n * 10 + g.index, f"trainer-{n:02d}-0", "llm-pretrain",
                     "research")

    def _serve(self, g: _Gpu, t: float, noise: float) -> _Work:
        traffic = 0.5 + 0.5 * math.sin(2 * math.pi * t / 1200.0)  # the same traffic reaches every replica
        n = g.node_no
        return _Work(0.20 + 0.55 * traffic + 0.08 * (noise - 0.5), 0.49 * MEM_TOTAL, 20000 + n * 10 + g.index,
                     f"llm-serve-{n:02d}{g.index}", "llm-serve", "inference")

    def _batch(self, g: _Gpu, t: float, noise: float) -> _Work:
        period = 900.0
        k = int(t // period)
        into = t - k * period
        job_len = 420.0 + 300.0 * random.Random(g.uuid + str(k)).random()
        pod = f"etl-{g.node_no:02d}-{k}"
        if into >= job_len:
            return _Work(0.0, 300.0, None, pod, "etl", "batch")  # between jobs: nothing on the GPU
        ramp = min(1.0, into / 20.0)
        return _Work((0.7 + 0.1 * noise) * ramp, 300.0 + ramp * 0.6 * MEM_TOTAL, 30000 + k, pod, "etl", "batch")

    def _notebook(self, g: _Gpu, t: float, noise: float) -> _Work:
        k = int(t // 720.0)
        into = t - k * 720.0
        busy = 240.0 + 180.0 * random.Random(g.uuid + str(k)).random()
        sm = (0.55 + 0.2 * noise) if into < busy else 0.0
        return _Work(sm, 0.2 * MEM_TOTAL, 40000 + g.node_no, f"notebook-{g.node_no:02d}", "jupyter", "users")

    def _chat_share(self, g: _Gpu, t: float) -> float:
        """This replica's share of its node's chat traffic, in units of a quarter of it: the load of
        the replicas that serve now (a draining one keeps its share until it is gone)."""
        seg = self._segment(g, t)
        weights = 0.0
        for p in self.gpus:
            if p.node_no == g.node_no and p.role == "chat":
                ps = self._segment(p, t)
                if ps is not None and (ps[2] == "serve" or (p is g and ps[2] == "drain")):
                    weights += p.wave[2] * ps[4]
        mine = g.wave[2] * (seg[4] if seg is not None else 0.0)
        return 4.0 * mine / max(weights, 1e-6)

    def _chat(self, g: _Gpu, t: float, noise: float) -> _Work:
        seg = self._segment(g, t)
        n = g.node_no
        pod = f"chat-{n:02d}{g.index}-{seg[3] if seg else 0}"
        if seg is None or seg[2] == "absent":
            return _Work(0.0, 400.0, None, pod, "chat", "inference")
        pid = 50000 + n * 100 + g.index * 10 + seg[3]
        mem = 0.9 * MEM_TOTAL  # the KV cache is allocated up front
        if seg[2] == "load":
            into = t - seg[0]
            sm = 0.25 if into < 2 else 0.03 + 0.1 * noise
            return _Work(sm, min(mem, 2000.0 + into * 2500.0), pid, pod, "chat", "inference",
                         util=20 + 30 * noise, pcie=6e9 * noise)  # weights coming in over PCIe
        period, phase, _ = g.wave
        wave = 0.55 + 0.3 * math.sin(2 * math.pi * t / period + phase)
        day = 0.85 + 0.15 * math.sin(2 * math.pi * t / 7200.0)
        drift = 1.0
        for d0, length, depth in g.drifts:
            if d0 <= t < d0 + length:
                x = (t - d0) / length  # down over the first third, holds, back up over the last third
                drift = 1.0 - (1.0 - depth) * min(1.0, 3 * x, 3 * (1 - x))
        burst = sum(h for b0, length, h in g.bursts if b0 <= t < b0 + length)
        demand = 0.45 * self._chat_share(g, t) * wave * day * drift + burst
        if seg[2] == "drain":
            demand *= max(0.0, 1.0 - (t - seg[0]) / 45.0)  # connections finish, no new ones arrive
        sm = min(0.92, 0.03 + 0.85 * demand) + 0.05 * (noise - 0.5)
        return _Work(max(0.0, sm), mem, pid, pod, "chat", "inference", util=min(100.0, 8 + sm * 120),
                     dram=min(0.9, 0.1 + 0.8 * sm))

    @staticmethod
    def _ft_event(g: _Gpu, seg: tuple[float, float, str, int, float], t: float) -> str | None:
        """Start-up, evaluation or checkpoint of a fine-tuning job at ``t``, if any."""
        into = t - seg[0]
        jr = random.Random(f"{g.uuid}-{seg[3]}")
        loading = jr.uniform(60, 180)
        if into < loading:
            return "start"
        every, length = jr.uniform(600, 1200), jr.uniform(20, 90)
        if (into - loading) % every >= every - length:
            return "eval"
        if (into - loading) % 2400.0 < 30.0 and into - loading > 600:
            return "checkpoint"
        return None

    def _finetune(self, g: _Gpu, t: float, noise: float) -> _Work:
        seg = self._segment(g, t)
        n = g.node_no
        if seg is None:
            return _Work(0.0, 300.0, None, f"ft-{n:02d}{g.index}", "finetune", "research")
        pid = 60000 + n * 100 + g.index * 10 + seg[3]
        pod = f"ft-{n:02d}{g.index}-{seg[3]}"
        level = seg[4]
        into = t - seg[0]
        ev = self._ft_event(g, seg, t)
        mem = 0.7 * MEM_TOTAL
        if ev == "start":
            sm = 0.25 if into < 2 else 0.05 + 0.25 * noise  # CUDA start-up, then loading data and compiling
            return _Work(sm, min(mem, 1000.0 + into * 1500.0), pid, pod, "finetune", "research")
        if ev == "eval":
            depth = random.Random(f"{g.uuid}-{seg[3]}-eval").uniform(0.35, 0.8)
            return _Work(level * depth + 0.02 * (noise - 0.5), mem, pid, pod, "finetune", "research")
        if ev == "checkpoint":
            return _Work(0.02 + 0.02 * noise, mem, pid, pod, "finetune", "research", util=15, pcie=5e9)
        return _Work(level + 0.03 * (noise - 0.5), mem, pid, pod, "finetune", "research")

    def _tools(self, g: _Gpu, t: float, noise: float) -> _Work:
        k = int(t // 7200.0)
        pid = 70000 + g.node_no * 100 + g.index * 10 + k
        pod = f"tools-{g.node_no:02d}{g.index}-{k}"
        slot = int(t // 240.0)
        what = random.Random(f"{g.uuid}-{slot}").choice(("compute", "memory", "copy", "copy", "idle"))
        if what == "idle" and random.Random(f"{g.uuid}-{slot - 1}").random() < 0.5:
            what = "compute"  # idle at most a few minutes at a time: this job is not an idle allocation
        mem = 0.3 * MEM_TOTAL
        if what == "compute":
            return _Work(0.8 + 0.04 * (noise - 0.5), mem, pid, pod, "etl-tools", "batch", util=100, dram=0.2)
        if what == "memory":
            return _Work(0.65 + 0.04 * (noise - 0.5), mem, pid, pod, "etl-tools", "batch", util=100,
                         dram=0.85 + 0.05 * noise)
        if what == "copy":
            return _Work(0.005 + 0.01 * noise, mem, pid, pod, "etl-tools", "batch", util=25 + 35 * noise,
                         dram=0.05, pcie=(6 + 14 * noise) * 1e9)
        return _Work(0.0, mem, pid, pod, "etl-tools", "batch", util=0, dram=0.0)

    # ---- records ----
    def records(self) -> Iterator[GpuRecord | EventRecord]:
        """1 Hz records of every GPU in time order (except what a stalled partition delays), and the
        agents' events about lost GPUs."""
        active: dict[str, Incident | None] = {g.uuid: None for g in self.gpus}
        delayed: dict[str, list[GpuRecord]] = {}
        next_sample: dict[str, float] = {}
        for s in range(self.seconds):
            t = self.t0 + s
            for g in self.gpus:
                inc = active[g.uuid]
                if inc is None or t > inc.end:
                    if inc is not None and inc.kind == "gpu_lost":
                        yield EventRecord(t, g.node, g.uuid, "gpu_recovered")
                    inc = next((i for i in g.incidents if i.onset <= t <= i.end), None)
                    active[g.uuid] = inc
                    if inc is not None and inc.kind == "gpu_lost":
                        yield EventRecord(t, g.node, g.uuid, "gpu_lost", None, "NVML: GPU is lost")
                silence = next((x for x in self.silences[g.node_no] if x[0] <= s < x[1] and g.index in x[3]), None)
                if silence is not None and silence[2] == "stretch":
                    if t < next_sample.get(g.uuid, 0.0):
                        continue
                    next_sample[g.uuid] = t + g.rng.uniform(15, 60)
                rec = self._record(g, float(s), t, inc)
                if rec is None or (silence is not None and silence[2] == "restart"):
                    continue
                if silence is not None and silence[2] == "partition":
                    delayed.setdefault(g.uuid, []).append(rec)
                    continue
                held = delayed.pop(g.uuid, None)
                if held:
                    yield from held
                yield rec
        for held in delayed.values():
            yield from held

    def _record(self, g: _Gpu, s: float, t: float, inc: Incident | None) -> GpuRecord | None:
        rng = g.rng
        noise = rng.random()
        role = g.role
        w = (self._train if role == "train" else self._serve if role == "serve" else self._batch if role == "batch"
             else self._notebook if role == "notebook" else self._chat if role == "chat"
             else self._finetune if role == "finetune" else self._tools)(g, s, noise)
        sm, mem = w.sm, w.mem
        util: float | None = w.util
        dram: float | None = w.dram
        pcie = w.pcie
        kind = inc.detail.get("shape", inc.kind) if inc is not None else None
        if inc is not None and role == "train" and kind == "throughput_drop" and inc.detail.get("pod"):
            kind = "pod_stall"
        mem_heat = 0.0
        clock = 1485.0 + 15 * round(10 * rng.random()) if sm > 0.85 else (1980.0 if sm >= 0.02 else 345.0)
        reasons = 0x4 if sm > 0.85 else (0x1 if sm < 0.02 and (util is None or util < 5) else 0x0)
        temp = 34.0 + 38.0 * sm + 2.0 * rng.random()
        power = 685.0 + 15 * rng.random() if reasons & 0x4 else 80.0 + 612.0 * sm + 5 * rng.random()
        if rng.random() < 1 / 7200:
            g.sbe += 1  # the odd corrected error: normal
        if inc is not None and kind is not None:
            into = t - inc.onset
            if kind == "thermal_throttle":
                temp = 91.0 + 2 * rng.random()
                reasons |= 0x40 if inc.gpu[-1] in "02468ace" else 0x20
                clock *= inc.detail["factor"]
                sm *= 0.5 + 0.5 * inc.detail["factor"]
            elif kind == "power_throttle":
                if inc.gpu[-1] in "02468ace":
                    reasons |= 0x80
                else:
                    reasons |= 0x4  # capped well below its rated 700 W (a BMC or power-delivery cap)
                clock = 1485.0 * inc.detail["factor"] if sm > 0.1 else clock
                sm *= 0.8
                power = 80.0 + 612.0 * sm * inc.detail["factor"] + 5 * rng.random()
            elif kind == "throughput_drop" and role == "finetune":  # input-bound: bursts between waits
                sm = w.sm * inc.detail["factor"] * (2.0 * noise)
                util = 100.0 * min(1.0, 2.0 * sm + 0.1)
            elif kind in ("throughput_drop", "pod_stall"):
                sm *= inc.detail["factor"]
                util = None if util is None else util * inc.detail["factor"]
            elif kind == "drift":
                slower = 1.0 - (1.0 - inc.detail["floor"]) * min(1.0, into / inc.detail["ramp"])
                sm *= slower
                util = None if util is None else util * slower
            elif kind == "straggler":
                sm = inc.detail["factor"] + 0.03 * (noise - 0.5)
            elif kind == "hbm_heat":
                mem_heat = inc.detail["delta"] * min(1.0, into / inc.detail["ramp"])
            elif kind == "memory_leak":
                g.leak_mib += inc.detail["factor"]
                mem = min(mem + g.leak_mib, MEM_TOTAL - 200)
            elif kind == "xid" and into < 1.0:
                g.xid = int(inc.detail["code"])
            elif kind == "ecc_dbe" and into < 1.0:
                g.dbe += 1
                g.xid = 48
            elif kind == "ecc_sbe_rising":
                if rng.random() < min(0.6, 0.05 + into / 400.0):
                    g.sbe += 1 + int(into / 120)
            elif kind == "pcie_replay_storm":
                g.replay += rng.randint(10, 40)
            elif kind == "idle_allocated":
                sm, util = 0.0, 0.0
                clock, reasons = 345.0, 0x1
                temp, power = 33.0, 80.0
            elif kind == "launch_bound":  # tiny kernels: always one resident, SMs barely working
                sm = 0.0003 + 0.008 * noise
                util, dram, pcie = 25.0 + 20.0 * rng.random(), 0.002, 3.0 * MIB
                clock, reasons = 1980.0, 0x0
                power = 120.0 + 10 * noise
            elif kind == "gpu_lost":
                if into < 1.0 and inc.detail.get("xid79"):
                    g.xid = 79
                else:
                    return None
        elif g.leak_mib:
            g.leak_mib = 0.0  # the leaking process was restarted
        if w.pid is None:
            procs: list[ProcessRecord] = []
            util = 0.0
        else:
            procs = [ProcessRecord(pid=w.pid, name="python", used_memory_mib=mem, sm_util=round(sm * 100),
                                   namespace=w.ns, pod=w.pod, container="main", service=w.service)]
        if util is None:
            util = float(min(100, round(sm * 105)))
        if dram is None:
            dram = round(0.17 * sm + 0.02 * noise, 4)
        metrics = {
            "DCGM_FI_DEV_GPU_UTIL": float(round(util)),
            "DCGM_FI_PROF_SM_ACTIVE": round(sm, 4),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(min(1.0, sm * 1.04), 4),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(sm * 0.97, 4),
            "DCGM_FI_PROF_DRAM_ACTIVE": round(dram, 4),
            "DCGM_FI_PROF_PCIE_TX_BYTES": round(0.3 * pcie),
            "DCGM_FI_PROF_PCIE_RX_BYTES": round(0.7 * pcie),
            "DCGM_FI_DEV_SM_CLOCK": float(round(clock)),
            "DCGM_FI_DEV_MEM_CLOCK": 3201.0,
            "DCGM_FI_DEV_GPU_TEMP": float(round(temp)),
            "DCGM_FI_DEV_MEMORY_TEMP": float(round(temp + 4 + mem_heat)),
            "DCGM_FI_DEV_POWER_USAGE": round(min(power, 700.0), 3),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
            "DCGM_FI_DEV_FB_USED": float(round(mem)),
            "DCGM_FI_DEV_FB_FREE": float(round(MEM_TOTAL - mem)),
            "DCGM_FI_DEV_FB_RESERVED": 0.0,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(reasons),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": g.replay,
            "DCGM_FI_DEV_XID_ERRORS": float(g.xid),
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": g.sbe,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": g.dbe,
            "DCGM_FI_DEV_PSTATE": 0.0 if sm > 0.02 or util > 5 else 8.0,
        }
        return GpuRecord(ts=t, node=g.node, gpu=g.uuid, metrics=metrics, gpu_index=g.index, model="NVIDIA H200",
                         processes=procs)
