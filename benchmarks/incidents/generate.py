"""A generator of fleet traces with labelled GPU incidents and hard negatives.

Why our own generator: no public data set labels GPU incidents. The fleet mixes what
real clusters run (GPU-FACTS.md): 4-GPU training pods (SM activity ~0.91 at the power
cap, with pod-wide evaluation pauses every ~30 min and checkpoints every hour), serving
replicas of one service whose traffic rises and falls together, batch jobs that start
(memory ramping up) and stop (the GPU empty between jobs), and notebooks that idle for
up to 8 minutes at a time. Those are the hard negatives: a detector that fires on them
loses precision. Incidents of every kind are injected at random times and labelled
``{kind, node, gpu, start, end}``; ``start`` is when a perfect detector could know
(for an idle allocated GPU, the configured idle time after the GPU went idle).

Everything is a pure function of the seed, so a trace can be regenerated bit for bit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from telemetry.records import GpuRecord, ProcessRecord

KINDS = ("thermal_throttle", "power_throttle", "throughput_drop", "straggler", "memory_leak", "xid", "ecc_dbe",
         "ecc_sbe_rising", "pcie_replay_storm", "idle_allocated", "gpu_lost")
ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "train": ("thermal_throttle", "power_throttle", "straggler", "memory_leak", "xid", "ecc_dbe",
              "ecc_sbe_rising", "pcie_replay_storm", "gpu_lost"),
    "serve": ("thermal_throttle", "power_throttle", "throughput_drop", "throughput_drop", "memory_leak", "xid",
              "ecc_dbe", "pcie_replay_storm", "gpu_lost"),
    "batch": ("xid", "ecc_sbe_rising", "pcie_replay_storm"),
    "notebook": ("idle_allocated", "idle_allocated", "xid"),
}
ROLES = ("train", "train", "train", "train", "serve", "serve", "batch", "notebook")
XID_CODES = (13, 31, 43, 63, 64, 94, 95)
MEM_TOTAL = 143771.0
IDLE_AFTER = 600.0


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
    index: int
    uuid: str
    role: str
    rng: random.Random
    incidents: list[Incident] = field(default_factory=list)
    sbe: float = 0.0
    dbe: float = 0.0
    replay: float = 0.0
    xid: int = 0
    leak_mib: float = 0.0


def _duration(kind: str, rng: random.Random) -> float:
    if kind in ("xid", "ecc_dbe"):
        return 1.0
    if kind == "idle_allocated":
        return IDLE_AFTER + rng.uniform(240, 600)
    if kind == "gpu_lost":
        return rng.uniform(180, 480)
    return rng.uniform(180, 420)


class Fleet:
    """``nodes`` nodes of 8 GPUs over ``hours`` at 1 Hz; iterate :meth:`records`, read :attr:`incidents`."""

    def __init__(self, nodes: int = 4, hours: float = 3.0, seed: int = 1, t0: float = 1_764_489_600.0) -> None:
        self.t0 = t0
        self.seconds = int(hours * 3600)
        self.rng = random.Random(seed)
        self.gpus: list[_Gpu] = []
        for n in range(nodes):
            for i, role in enumerate(ROLES):
                uid = f"GPU-{seed:04x}{n:04x}-{i:04x}-4000-8000-{self.rng.getrandbits(48):012x}"
                self.gpus.append(_Gpu(f"gpu-node-{n:02d}", i, uid, role, random.Random(self.rng.getrandbits(32))))
        self.eval_phase = {n: self.rng.uniform(0, 1800) for n in range(nodes)}
        self.incidents: list[Incident] = []
        for g in self.gpus:
            self._schedule(g)

    def _schedule(self, g: _Gpu) -> None:
        rng = g.rng
        t = 900.0 + rng.uniform(0, 600)
        last_code = 0
        while True:
            kind = rng.choice(ROLE_KINDS[g.role])
            dur = _duration(kind, rng)
            if t + dur + 300 > self.seconds:
                break
            onset = self.t0 + t
            start = onset + IDLE_AFTER if kind == "idle_allocated" else onset
            detail: dict[str, Any] = {}
            if kind == "xid":  # the XID field holds the last code: a repeat of the same one would not show
                detail["code"] = rng.choice([c for c in XID_CODES if c != last_code])
                last_code = detail["code"]
            if kind == "gpu_lost":
                detail["xid79"] = rng.random() < 0.5
            # how bad the fault is varies, as it does in the field
            detail["factor"] = {"thermal_throttle": rng.uniform(0.6, 0.85), "power_throttle": rng.uniform(0.5, 0.8),
                                "throughput_drop": rng.uniform(0.35, 0.55), "straggler": rng.uniform(0.5, 0.68),
                                "memory_leak": rng.uniform(10.0, 60.0)}.get(kind, 1.0)
            inc = Incident(kind, g.node, g.uuid, start, onset + dur, onset, detail)
            g.incidents.append(inc)
            self.incidents.append(inc)
            t += dur + rng.uniform(900, 1500)  # the GPU settles (and baselines re-learn) in between

    # ---- normal behaviour (the hard negatives live here) ----
    def _train(self, g: _Gpu, t: float, noise: float) -> tuple[float, float]:
        node = int(g.node[-2:])
        cycle = (t + self.eval_phase[node]) % 1800.0
        sm = 0.915 + 0.02 * (noise - 0.5)
        if cycle >= 1800.0 - 120.0:  # evaluation pause: every GPU of the pod at once
            sm = 0.30 + 0.05 * noise
        if (t + 600) % 3600.0 < 30.0:  # checkpoint
            sm = 0.05 + 0.03 * noise
        return sm, 0.83 * MEM_TOTAL

    def _serve(self, g: _Gpu, t: float, noise: float) -> tuple[float, float]:
        traffic = 0.5 + 0.5 * math.sin(2 * math.pi * t / 1200.0)  # the same traffic reaches every replica
        return 0.20 + 0.55 * traffic + 0.08 * (noise - 0.5), 0.49 * MEM_TOTAL

    def _batch(self, g: _Gpu, t: float, noise: float) -> tuple[float, float, int | None]:
        period = 900.0
        k = int(t // period)
        into = t - k * period
        job_len = 420.0 + 300.0 * random.Random(g.uuid + str(k)).random()
        if into >= job_len:
            return 0.0, 300.0, None  # between jobs: nothing on the GPU
        ramp = min(1.0, into / 20.0)
        return (0.7 + 0.1 * noise) * ramp, 300.0 + ramp * 0.6 * MEM_TOTAL, 30000 + k

    def _notebook(self, g: _Gpu, t: float, noise: float) -> float:
        k = int(t // 720.0)
        into = t - k * 720.0
        busy = 240.0 + 180.0 * random.Random(g.uuid + str(k)).random()
        return (0.55 + 0.2 * noise) if into < busy else 0.0

    # ---- records ----
    def records(self) -> Iterator[GpuRecord]:
        """1 Hz records of every GPU, in time order."""
        active: dict[str, Incident | None] = {g.uuid: None for g in self.gpus}
        for s in range(self.seconds):
            t = self.t0 + s
            for g in self.gpus:
                inc = active[g.uuid]
                if inc is None or t > inc.end:
                    inc = next((i for i in g.incidents if i.onset <= t <= i.end), None)
                    active[g.uuid] = inc
                rec = self._record(g, float(s), t, inc)
                if rec is not None:
                    yield rec

    def _record(self, g: _Gpu, s: float, t: float, inc: Incident | None) -> GpuRecord | None:
        rng = g.rng
        noise = rng.random()
        pid: int | None
        pod: str
        service: str
        ns = "research"
        node_no = int(g.node[-2:])
        if g.role == "train":
            sm, mem = self._train(g, s, noise)
            pid, pod, service = 10000 + node_no * 10 + g.index, f"trainer-{node_no:02d}-0", "llm-pretrain"
        elif g.role == "serve":
            sm, mem = self._serve(g, s, noise)
            pid, pod, service, ns = 20000 + node_no * 10 + g.index, f"llm-serve-{node_no:02d}{g.index}", "llm-serve", \
                "inference"
        elif g.role == "batch":
            sm, mem, pid = self._batch(g, s, noise)
            pod, service, ns = f"etl-{node_no:02d}-{int(s // 900)}", "etl", "batch"
        else:
            sm = self._notebook(g, s, noise)
            mem, pid, pod, service, ns = 0.2 * MEM_TOTAL, 40000 + node_no, f"notebook-{node_no:02d}", "jupyter", "users"
        kind = inc.kind if inc is not None else None
        clock = 1485.0 + 15 * round(10 * rng.random()) if sm > 0.85 else (1980.0 if sm >= 0.02 else 345.0)
        reasons = 0x4 if sm > 0.85 else (0x1 if sm < 0.02 else 0x0)
        temp = 34.0 + 38.0 * sm + 2.0 * rng.random()
        power = 80.0 + 612.0 * sm + 5 * rng.random()
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
                    reasons |= 0x4
                clock = 1485.0 * inc.detail["factor"] if sm > 0.1 else clock
                sm *= 0.8
            elif kind == "throughput_drop":
                sm *= inc.detail["factor"]
            elif kind == "straggler":
                sm = inc.detail["factor"] + 0.03 * (noise - 0.5)
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
                sm = 0.0
                clock, reasons = 345.0, 0x1
                temp, power = 33.0, 80.0
            elif kind == "gpu_lost":
                if into < 1.0 and inc.detail.get("xid79"):
                    g.xid = 79
                elif into >= 1.0 or not inc.detail.get("xid79"):
                    return None
        elif g.leak_mib:
            g.leak_mib = 0.0  # the leaking process was restarted
        if g.role == "batch" and pid is None:
            procs: list[ProcessRecord] = []
        else:
            procs = [ProcessRecord(pid=pid or 0, name="python", used_memory_mib=mem, sm_util=round(sm * 100),
                                   namespace=ns, pod=pod, container="main", service=service)]
        metrics = {
            "DCGM_FI_DEV_GPU_UTIL": float(min(100, round(sm * 105))),
            "DCGM_FI_PROF_SM_ACTIVE": round(sm, 4),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(min(1.0, sm * 1.04), 4),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(sm * 0.97, 4),
            "DCGM_FI_PROF_DRAM_ACTIVE": round(0.17 * sm + 0.02 * noise, 4),
            "DCGM_FI_DEV_SM_CLOCK": float(round(clock)),
            "DCGM_FI_DEV_MEM_CLOCK": 3201.0,
            "DCGM_FI_DEV_GPU_TEMP": float(round(temp)),
            "DCGM_FI_DEV_MEMORY_TEMP": float(round(temp + 4)),
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
            "DCGM_FI_DEV_PSTATE": 0.0 if sm > 0.02 else 8.0,
        }
        return GpuRecord(ts=t, node=g.node, gpu=g.uuid, metrics=metrics, gpu_index=g.index, model="NVIDIA H200",
                         processes=procs)
