"""A second, independent fleet generator: the held-out set (never tuned on).

Why a second one: the detectors were tuned on tests/support/incidents/generate.py; figures
from that generator alone say how well they fit it. This one is written separately, with
other shapes, parameters and noise, and is only ever used to report:

* nodes of 4 or of 8 GPUs; irregular sampling (busy GPUs every 0.8-1.3 s, idle ones every
  5-10 s), log-normal noise and the odd glitched sample (one reading of 0);
* **pretrain**: 8-GPU pods at 0.80-0.97, whole-pod evaluations of 60-150 s at 40-70% of
  the level every 20-40 min, checkpoints of 40-120 s at 5-15%;
* **sft**: single-GPU jobs at 0.60-0.90 that restart every 40-80 min with start-ups that
  ramp for 30-240 s, evaluations of 30-100 s;
* **inference**: services of 3-6 replicas whose demand is a compressed day (2-4 h period)
  times a per-replica Ornstein-Uhlenbeck walk (unbalanced routing), with Poisson request
  noise and bursts of 30-180 s; an autoscaler adds a replica when the replicas run hot
  and drains one (20-60 s ramp) when they idle; canaries serve 10-30% of a replica's share;
* **embed**: batch jobs alternating compute, memory-bound and copy phases; spare GPUs with
  nothing on them;
* the pipeline's silences: agent restarts (10-120 s), partitions delivered up to 5 min
  late, sampling stretched to 20-90 s.

Incidents are labelled like the tuning generator's (``Incident``), and lost GPUs and XIDs
are reported by agent events, as the real agent does (an XID also sets the field, which holds
the last one: until 2026-12-02 a repeated XID set the field to 0 and sent no event, so 6 of
its 76 XIDs in seeds 101-103 could not be seen by anything).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from telemetry import keys as tk
from telemetry.records import EventRecord, GpuRecord, ProcessRecord
from tests.support.incidents.generate import Incident

TOTAL = 143771.0
IDLE_AFTER, LAUNCH_AFTER = 600.0, 90.0
KIND_OF = {"sft_stall": "throughput_drop", "sft_drift": "throughput_drop", "pod_stall": "throughput_drop",
           "capacity": "throughput_drop", "hbm": "metric_anomaly"}


@dataclass
class _Slot:
    node: str
    node_no: int
    index: int
    uuid: str
    role: str
    rng: random.Random
    group: int = 0  # pod (pretrain) or service (inference) number
    incidents: list[Incident] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=lambda: {"sbe": 0.0, "dbe": 0.0, "replay": 0.0, "xid": 0.0})
    walk: float = 0.0
    leak: float = 0.0
    next_ts: float = 0.0


class HeldoutFleet:
    """``nodes`` nodes (4 or 8 GPUs each) over ``hours``; iterate :meth:`records`, read :attr:`incidents`."""

    def __init__(self, nodes: int = 6, hours: float = 3.0, seed: int = 101, t0: float = 1_767_225_600.0,
                 inference_figures: bool = False) -> None:
        self.t0, self.seconds, self.rng = t0, int(hours * 3600), random.Random(seed * 7919)
        # the serving replicas' own figures, as the agent scrapes them from an annotated vLLM/Triton pod
        # (agent/inference/): off by default, so the suite's figures stay those of GPU readings alone
        self.inference_figures = inference_figures
        self.slots: list[_Slot] = []
        self.incidents: list[Incident] = []
        pods = services = 0
        for n in range(nodes):
            size = 8 if n % 3 != 2 else 4
            if size == 4:
                roles = ["sft", "sft", "inference", "spare"]
            else:
                roles = ["pretrain"] * 8 if n % 3 == 0 else ["inference"] * 4 + ["embed", "sft", "sft", "spare"]
            if roles[0] == "pretrain":
                pods += 1
            for i, role in enumerate(roles):
                uid = f"GPU-{self.rng.getrandbits(32):08x}-{self.rng.getrandbits(16):04x}-{n:04x}-{i:04x}-h"
                s = _Slot(f"node-{chr(97 + n)}", n, i, uid, role, random.Random(self.rng.getrandbits(32)))
                s.group = pods if role == "pretrain" else (i % 2 if role == "inference" else 0)
                self.slots.append(s)
        del services
        self.eval_every = {p: self.rng.uniform(1200, 2400) for p in range(pods + 1)}
        self.eval_len = {p: self.rng.uniform(60, 150) for p in range(pods + 1)}
        self.level = {s.uuid: self.rng.uniform(0.8, 0.97) for s in self.slots}
        self.silence = {n: self._silences(n) for n in range(nodes)}
        self.scaled: dict[str, list[tuple[float, float]]] = {}
        for s in self.slots:
            if s.role == "inference" and s.index in (3, 2):
                self.scaled[s.uuid] = self._scale_windows(s)
        for s in self.slots:
            self._plan(s)
        self._pod_stalls()

    # ---- structure ----
    def _silences(self, n: int) -> list[tuple[float, float, str, set[int]]]:
        r = random.Random(self.rng.getrandbits(32))
        out = []
        t = r.uniform(300, 1800)
        while t < self.seconds - 900:
            kind = r.choice(["restart", "late", "slow", "late"])
            length = {"restart": r.uniform(10, 120), "late": r.uniform(60, 300), "slow": r.uniform(240, 900)}[kind]
            out.append((t, t + length, kind, set(r.sample(range(8), r.randint(1, 5))) if kind == "late"
                        else set(range(8))))
            t += length + r.uniform(2400, 6000)
        return out

    def _scale_windows(self, s: _Slot) -> list[tuple[float, float]]:
        """When an autoscaled replica exists: on for 20-60 min, off for 15-45 min."""
        r = random.Random(s.uuid)
        out, t = [], r.uniform(0, 1200)
        while t < self.seconds:
            on = r.uniform(1200, 3600)
            out.append((t, t + on))
            t += on + r.uniform(900, 2700)
        return out

    def _quiet(self, s: _Slot, a: float, b: float) -> bool:
        return all(b < x0 - 90 or a > x1 + 90 or s.index not in who for x0, x1, _, who in self.silence[s.node_no])

    def _plan(self, s: _Slot) -> None:
        menu = {"pretrain": ["straggler", "thermal", "power", "leak", "xid", "dbe", "sbe", "replay", "lost", "hbm"],
                "sft": ["sft_stall", "sft_drift", "launch", "leak", "xid", "idle", "thermal"],
                "inference": ["capacity", "capacity", "leak", "xid", "power", "lost", "replay"],
                "embed": ["launch", "replay", "xid", "sbe"], "spare": []}[s.role]
        r = s.rng
        t = r.uniform(1200, 2400)
        while menu and t < self.seconds - 1200:
            kind = r.choice(menu)
            dur = {"xid": 1.0, "dbe": 1.0, "idle": IDLE_AFTER + r.uniform(300, 700), "launch": LAUNCH_AFTER +
                   r.uniform(150, 300), "lost": r.uniform(120, 600), "sft_drift": r.uniform(500, 800),
                   "hbm": r.uniform(900, 1500)}.get(kind, r.uniform(240, 500))
            if not self._ok(s, kind, t, t + dur):
                t += r.uniform(120, 600)
                continue
            detail: dict[str, Any] = {"shape": kind, "f": r.uniform(0.3, 0.6)}
            onset = self.t0 + t
            start = onset + (IDLE_AFTER if kind == "idle" else LAUNCH_AFTER if kind == "launch" else 0.0)
            if kind == "sft_drift":
                detail["ramp"], detail["floor"] = r.uniform(180, 480), r.uniform(0.4, 0.55)
                start = onset + detail["ramp"] * math.log(1 / 0.6) / math.log(1 / detail["floor"])
            if kind == "hbm":
                detail["rise"] = r.uniform(9.0, 25.0)
                start = onset + 180.0 * 7.0 / detail["rise"]
            if kind == "xid":
                detail["code"] = r.choice([13, 31, 43, 45, 61, 62, 74, 92, 119])
            label = KIND_OF.get(kind, {"thermal": "thermal_throttle", "power": "power_throttle", "leak": "memory_leak",
                                       "dbe": "ecc_dbe", "sbe": "ecc_sbe_rising", "replay": "pcie_replay_storm",
                                       "lost": "gpu_lost", "idle": "idle_allocated", "launch": "launch_bound"}.get(kind,
                                                                                                           kind))
            inc = Incident(label, s.node, s.uuid, start, onset + dur, onset, detail)
            s.incidents.append(inc)
            self.incidents.append(inc)
            t += dur + r.uniform(1200, 2000)

    def _ok(self, s: _Slot, kind: str, a: float, b: float) -> bool:
        if not self._quiet(s, a, b):
            return False
        if kind == "hbm" and a < 3600:
            return False
        if s.role == "sft":
            job = self._job(s, a)
            if job is None or job != self._job(s, b + 120) or a - job[0] < 900:
                return False
            return all(self._sft_phase(s, job, x)[0] == "work" for x in range(int(a), int(b) + 60, 20))
        if s.role == "inference":
            if s.uuid in self.scaled and not any(x0 + 600 < a and b + 120 < x1 for x0, x1 in self.scaled[s.uuid]):
                return False
            near = [p for p in self.slots if p.role == "inference" and p.node_no == s.node_no and p.uuid in self.scaled]
            if any(a - 300 <= e <= b + 120 for p in near for w in self.scaled[p.uuid] for e in w):
                return False  # no autoscaling around it: that would be another story
            if kind == "capacity":
                return min(self._demand(s, self.t0 + x) for x in range(int(a), int(b), 20)) >= 0.3
        if s.role == "pretrain":
            period, length = self.eval_every[s.group], self.eval_len[s.group]
            return not any((x % period) > period - length - 60 for x in range(int(a), int(b) + 60, 10))
        return True

    def _pod_stalls(self) -> None:
        for pod in {s.group for s in self.slots if s.role == "pretrain"}:
            members = [s for s in self.slots if s.role == "pretrain" and s.group == pod]
            r = random.Random(pod * 31 + 7)
            for _ in range(40):
                a = r.uniform(2000, self.seconds - 1000)
                b = a + r.uniform(360, 600)
                if all(self._ok(s, "pod_stall", a, b) and all(b + 300 < i.onset - self.t0 or a > i.end - self.t0 + 300
                                                             for i in s.incidents) for s in members):
                    f = r.uniform(0.2, 0.5)
                    for s in members:
                        inc = Incident("throughput_drop", s.node, s.uuid, self.t0 + a, self.t0 + b, self.t0 + a,
                                       {"shape": "pod_stall", "f": f})
                        s.incidents.append(inc)
                        self.incidents.append(inc)
                    break

    def _job(self, s: _Slot, t: float) -> tuple[float, float, int] | None:
        r = random.Random(s.uuid + "jobs")
        begin, k = r.uniform(0, 900), 0
        while begin < self.seconds + 7200:
            length = r.uniform(2400, 4800)
            if begin <= t < begin + length:
                return begin, begin + length, k
            begin += length + r.uniform(30, 240)
            k += 1
        return None

    @staticmethod
    def _sft_phase(s: _Slot, job: tuple[float, float, int], t: float) -> tuple[str, float]:
        r = random.Random(f"{s.uuid}/{job[2]}")
        warm, every, length = r.uniform(30, 240), r.uniform(900, 1800), r.uniform(30, 100)
        into = t - job[0]
        if into < warm:
            return "warm", into / warm
        if (into - warm) % every > every - length:
            return "eval", r.uniform(0.35, 0.75)
        return "work", 1.0

    def _demand(self, s: _Slot, t: float) -> float:
        r = random.Random(s.uuid + "d")
        period, phase, share = r.uniform(7200, 14400), r.uniform(0, 6.3), r.uniform(0.6, 1.4)
        day = 0.55 + 0.35 * math.sin(2 * math.pi * (t - self.t0) / period + phase)
        others = [p for p in self.slots if p.role == "inference" and p.node_no == s.node_no]
        active = sum(1 for p in others if self._serving(p, t))
        return min(1.0, share * day * len(others) / max(1, active) * 0.6)

    def _serving(self, s: _Slot, t: float) -> bool:
        wins = self.scaled.get(s.uuid)
        return wins is None or any(a <= t - self.t0 < b for a, b in wins)

    # ---- samples ----
    def _work(self, s: _Slot, t: float) -> tuple[float, dict[str, float], ProcessRecord | None]:
        """SM activity, extra metrics and the process of the normal workload at ``t``."""
        r, x = s.rng, t - self.t0
        extra: dict[str, float] = {}
        if s.role == "pretrain":
            level = self.level[f"pod{s.group}"] if f"pod{s.group}" in self.level else \
                self.level.setdefault(f"pod{s.group}", r.uniform(0.8, 0.97))
            period, length = self.eval_every[s.group], self.eval_len[s.group]
            sm = level
            if x % period > period - length:
                sm = level * (0.4 + 0.3 * ((s.group * 0.37) % 1))
            if x % 4200 < 40 + 80 * ((s.group * 0.61) % 1) and x > 600:
                sm = level * 0.1
            proc = ProcessRecord(pid=7000 + s.node_no * 10 + s.index, namespace="lm",
                                 pod=f"pretrain-{s.group}-{s.node_no}", service="pretrain")
            return sm, extra, proc
        if s.role == "sft":
            job = self._job(s, x)
            if job is None:
                return 0.0, extra, None
            what, f = self._sft_phase(s, job, x)
            level = 0.6 + 0.3 * random.Random(f"{s.uuid}{job[2]}").random()
            sm = level * (0.1 + 0.9 * f) if what == "warm" else level * f
            proc = ProcessRecord(pid=9000 + 100 * s.node_no + 10 * s.index + job[2], namespace="ft",
                                 pod=f"sft-{s.node_no}{s.index}-{job[2]}", service=f"sft-{s.node_no}{s.index}")
            return sm, extra, proc
        if s.role == "inference":
            if not self._serving(s, t):
                return 0.0, extra, None
            s.walk += -0.002 * s.walk + 0.01 * r.gauss(0, 1)  # unbalanced routing: a slow random walk
            lam = max(0.0, self._demand(s, t) * (1 + max(-0.6, min(0.6, s.walk)))) * 40
            burst = 0.25 if (int(x) // 97 + s.index) % 11 == 0 and x % 97 < 60 else 0.0
            sm = min(0.95, (r.gauss(lam, math.sqrt(lam + 1e-9)) / 40 if lam > 0 else 0.0) * 0.9 + burst)
            extra["DCGM_FI_DEV_GPU_UTIL"] = min(100.0, 5 + 110 * sm)
            wins = self.scaled.get(s.uuid)
            if wins:
                start = next(a for a, b in wins if a <= x < b)
                if x - start < 40:
                    sm = 0.2 * r.random()
                end = next(b for a, b in wins if a <= x < b)
                if end - x < 45:
                    sm *= (end - x) / 45
            gen = next((k for k, (a, b) in enumerate(wins or []) if a <= x < b), 0)
            if self.inference_figures:
                # requests completed: what the GPU's activity serves (a burst is heavier requests), and a
                # queue of a few milliseconds while the replica keeps up
                extra[tk.INFERENCE_REQUESTS_PER_SECOND] = round(max(0.0, sm - burst) / 0.9 * 40, 2)
                extra[tk.INFERENCE_QUEUE_SECONDS] = round(0.004 + 0.004 * r.random(), 4)
                extra[tk.INFERENCE_PENDING_REQUESTS] = float(r.randint(0, 2))
            proc = ProcessRecord(pid=11000 + 100 * s.node_no + 10 * s.index + gen, namespace="serve",
                                 pod=f"api-{s.node_no}-{s.index}-{gen}", service="api")
            return max(0.0, sm), extra, proc
        if s.role == "embed":
            k = int(x // 300)
            what = random.Random(f"{s.uuid}{k}").choice(["compute", "memory", "copy"])
            proc = ProcessRecord(pid=13000 + s.node_no, namespace="batch", pod=f"embed-{s.node_no}", service="embed")
            if what == "memory":
                extra.update({"DCGM_FI_PROF_DRAM_ACTIVE": 0.9, "DCGM_FI_DEV_GPU_UTIL": 100.0})
                return 0.7, extra, proc
            if what == "copy":
                extra.update({"DCGM_FI_PROF_PCIE_RX_BYTES": 12e9, "DCGM_FI_DEV_GPU_UTIL": 40.0,
                              "DCGM_FI_PROF_DRAM_ACTIVE": 0.05})
                return 0.008, extra, proc
            return 0.85, extra, proc
        return 0.0, extra, None

    def _sample(self, s: _Slot, t: float, inc: Incident | None) -> GpuRecord | None:
        r = s.rng
        sm, extra, proc = self._work(s, t)
        sm = max(0.0, sm * math.exp(r.gauss(0, 0.015)))
        if r.random() < 1 / 5000:
            sm = 0.0  # a glitched reading
        temp, mem_extra, clock, reasons, power = 30 + 45 * sm + r.gauss(0, 0.7), 0.0, 1755.0, 0, 90 + 600 * sm
        fb = (0.75 if s.role == "pretrain" else 0.6 if proc else 0.003) * TOTAL
        if sm > 0.88:
            reasons, clock, power = 0x4, 1500.0 + r.gauss(0, 20), 695 + r.random() * 5
        c = s.counters
        if inc is not None:
            sh, into, f = inc.detail["shape"], t - inc.onset, inc.detail["f"]
            if sh == "lost":
                if into < 1 and f > 0.45:
                    c["xid"] = 79
                else:
                    return None
            elif sh in ("sft_stall", "pod_stall", "capacity"):
                sm *= f * (1.6 * r.random() + 0.2) if sh == "sft_stall" else f
                extra["DCGM_FI_DEV_GPU_UTIL"] = min(100.0, 130 * sm)
                if sh == "capacity" and tk.INFERENCE_REQUESTS_PER_SECOND in extra:
                    # fewer completed while the same demand arrives: requests wait, more each minute
                    extra[tk.INFERENCE_REQUESTS_PER_SECOND] *= f
                    extra[tk.INFERENCE_QUEUE_SECONDS] = round(0.05 + 0.5 * min(1.0, into / 60.0) * (1 - f), 4)
                    extra[tk.INFERENCE_PENDING_REQUESTS] = float(round(3 + 40 * min(1.0, into / 60.0) * (1 - f)))
            elif sh == "sft_drift":
                sm *= max(inc.detail["floor"], inc.detail["floor"] ** (into / inc.detail["ramp"]))
            elif sh == "straggler":
                sm *= 0.55 + 0.15 * f
            elif sh == "thermal":
                temp, reasons, clock = 88 + 7 * f, reasons | (0x20 if f < 0.45 else 0x40), clock * (0.5 + 0.5 * f)
            elif sh == "power":
                if f < 0.45:
                    reasons |= 0x80
                else:
                    reasons, power = reasons | 0x4, 300 + 300 * f
                clock *= 0.45 + 0.5 * f
            elif sh == "leak":
                s.leak += 20 + 300 * (f - 0.3)
                fb = min(TOTAL - 300, fb + s.leak)
            elif sh == "sbe":
                if r.random() < min(0.9, into / 300):
                    c["sbe"] += 1 + into // 60
            elif sh == "replay":
                c["replay"] += r.randint(5, 100)
            elif sh == "idle":
                sm, extra["DCGM_FI_DEV_GPU_UTIL"], reasons = 0.0, 0.0, 0x1
            elif sh == "launch":
                sm = 0.0002 + 0.02 * r.random() * f
                # the tiny-kernel loop replaces the job's work, its copies too (until 2026-12-02 an embed
                # job's copy phase kept its 12 GB/s under it: copy-bound, not launch-bound); the H200's
                # launch loops read 180-250 MiB/s of doorbells (collector/detect/launch.py)
                extra.update({"DCGM_FI_DEV_GPU_UTIL": 20 + 70 * f * r.random(), "DCGM_FI_PROF_DRAM_ACTIVE": 0.003,
                              "DCGM_FI_PROF_PCIE_RX_BYTES": 2e8, "DCGM_FI_PROF_PCIE_TX_BYTES": 5e7})
                power = 110.0
            elif sh == "hbm":
                mem_extra = inc.detail["rise"] * min(1.0, into / 180.0)
        else:
            s.leak = 0.0
        util = extra.pop("DCGM_FI_DEV_GPU_UTIL", min(100.0, 100 * sm / 0.9) if sm > 0.01 else 0.0)
        m = {"DCGM_FI_PROF_SM_ACTIVE": round(sm, 4), "DCGM_FI_DEV_GPU_UTIL": float(round(util)),
             "DCGM_FI_PROF_DRAM_ACTIVE": round(0.25 * sm, 4), "DCGM_FI_PROF_PCIE_TX_BYTES": 3e6,
             "DCGM_FI_PROF_PCIE_RX_BYTES": 9e6, "DCGM_FI_DEV_SM_CLOCK": float(round(clock)),
             "DCGM_FI_DEV_GPU_TEMP": float(round(temp)), "DCGM_FI_DEV_MEMORY_TEMP": float(round(temp + 6 + mem_extra)),
             "DCGM_FI_DEV_POWER_USAGE": round(min(700.0, power + r.gauss(0, 3)), 2),
             "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0, "DCGM_FI_DEV_FB_USED": float(round(fb)),
             "DCGM_FI_DEV_FB_FREE": float(round(TOTAL - fb)), "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(reasons),
             "DCGM_FI_DEV_XID_ERRORS": c["xid"], "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": c["sbe"],
             "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": c["dbe"], "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": c["replay"]}
        m.update(extra)
        if proc is not None:
            proc = replace(proc, used_memory_mib=fb)
        return GpuRecord(t, s.node, s.uuid, m, s.index, model="NVIDIA H200", processes=[proc] if proc else [])

    def records(self) -> Iterator[GpuRecord | EventRecord]:
        late: dict[str, list[GpuRecord]] = {}
        current: dict[str, Incident | None] = {}
        for sec in range(self.seconds):
            t = self.t0 + sec
            for s in self.slots:
                inc = next((i for i in s.incidents if i.onset <= t <= i.end), None)
                prev = current.get(s.uuid)
                if prev is not inc:
                    shape = inc.detail["shape"] if inc is not None else ""
                    if shape == "xid":  # the field holds the last XID from the moment it happens (a repeat
                        # of the same XID leaves it unchanged), and the agent sends each XID as an event
                        s.counters["xid"] = inc.detail["code"]
                        yield EventRecord(t, s.node, s.uuid, "xid", inc.detail["code"])
                    elif shape == "dbe":
                        s.counters["dbe"] += 1 + int(3 * inc.detail["f"])
                        s.counters["xid"] = 48
                    if prev is not None and prev.kind == "gpu_lost":
                        yield EventRecord(t, s.node, s.uuid, "gpu_recovered")
                    if inc is not None and inc.kind == "gpu_lost":
                        yield EventRecord(t, s.node, s.uuid, "gpu_lost", None, "GPU is lost")
                    current[s.uuid] = inc
                if t < s.next_ts:
                    continue
                quiet = next((q for q in self.silence[s.node_no] if q[0] <= sec < q[1] and s.index in q[3]), None)
                busy = (inc is not None) or s.role in ("pretrain", "embed") or (s.rng.random() < 0.5)
                gap = s.rng.uniform(0.8, 1.3) if busy else s.rng.uniform(5, 10)
                if quiet is not None and quiet[2] == "slow":
                    gap = s.rng.uniform(20, 90)
                s.next_ts = t + gap
                rec = self._sample(s, t, inc)
                if rec is None or (quiet is not None and quiet[2] == "restart"):
                    continue
                if quiet is not None and quiet[2] == "late":
                    late.setdefault(s.uuid, []).append(rec)
                    continue
                yield from late.pop(s.uuid, [])
                yield rec
        for held in late.values():
            yield from held
