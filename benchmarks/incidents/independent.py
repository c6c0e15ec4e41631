"""An independent labelled fleet: a Kubernetes GPU fleet of H100/H200 nodes, written without the detectors.

Why: the tuning generator (tests/support/incidents/generate.py) was written with the detectors,
and heldout.py by someone who knew them. This one was written only from the telemetry contract,
the metric catalog, GPU-FACTS.md and the real H100/H200 traces in benchmarks/data, so that its
score says how the detectors do on data they were not shaped for. Nothing here is tuned to them.

The fleet is simulated second by second, per GPU, and sampled by one agent per node:

- Work: each GPU second carries the work of the process on it (a training rank, a serving replica,
  a fine-tune, an ETL job, a notebook ...): SM activity, kernel residency (GPU_UTIL), tensor and
  DRAM activity, PCIe and NVLink bytes, the process's memory and its host-side figures.
- Physics: power follows the work and the clock (dynamic power ~ f^1.8), a power limit pulls the
  clock down (SW power cap bit), die and HBM temperatures follow power with their own lags from
  a node inlet temperature that wanders, and the driver's thermal controller slows the clock once
  the die passes its slowdown temperature.
- Agent: about one sample a second per node with jitter, stretches of slower sampling (a CPU
  budget), restarts (the node silent for tens of seconds; its first sample again lacks the GPM
  and rate figures), GPM figures averaged over the interval since the previous sample, the energy
  counter every few samples, an extra sample on an XID, and XID/gpu_lost/gpu_recovered events.

Everything is a pure function of the seed: every random stream is its own ``random.Random``
seeded with a string, and the streams that several GPUs share are kept (``_Lazy``) so that any
reader sees the same value for the same second.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from telemetry import keys as k
from telemetry.records import EventRecord, GpuRecord, ProcessRecord
from tests.support.incidents.generate import KINDS, Incident

# ---------------------------------------------------------------------------------------------
# hardware

_FMAX = 1980.0  # H100 SXM / H200 boost clock (MHz)
_IDLE_CLK = 345.0
_CLK_STEP = 15.0
_PWR_EXP = 1.8  # dynamic power ~ clock ** 1.8 (a 700 W cap held a matmul at 1485 MHz: GPU-FACTS.md)
_QUIET = 600  # no incident in the first ten minutes

R_IDLE, R_APP, R_PCAP, R_HWSLOW, R_SWTHERM, R_HWTHERM, R_BRAKE = 0x1, 0x2, 0x4, 0x8, 0x20, 0x40, 0x80


@dataclass(frozen=True)
class _Model:
    name: str
    total: int  # MiB, used + free + reserved
    reserved: int
    mem_clock: int
    idle_w: float  # no CUDA context
    ctx_w: float  # a context, no kernels
    t_sw: float  # die temperature where the driver starts slowing the clock
    t_hw: float


_H100 = _Model("NVIDIA H100 80GB HBM3", 81560, 480, 2619, 69.0, 117.0, 87.0, 91.0)
_H200 = _Model("NVIDIA H200", 143773, 616, 3201, 78.0, 123.0, 87.0, 91.0)
_BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


class _Lazy:
    """A random stream kept once drawn: ``at(i)`` is the same for every reader, in any order."""

    __slots__ = ("_f", "_v")

    def __init__(self, f: Callable[[], float]) -> None:
        self._f = f
        self._v: array[float] = array("d")

    def at(self, i: int) -> float:
        v = self._v
        i = max(i, 0)
        while len(v) <= i:
            v.append(self._f())
        return v[i]


def _ou(rng: random.Random, theta: float, sigma: float, x0: float = 0.0) -> Callable[[], float]:
    """An Ornstein-Uhlenbeck step per call (mean 0, stationary sd sigma / sqrt(2 theta))."""
    x = x0

    def step() -> float:
        nonlocal x
        x += -theta * x + sigma * rng.gauss(0.0, 1.0)
        return x

    return step


class _Node:
    def __init__(self, name: str, model: _Model, role: str, seed: str, rng: random.Random) -> None:
        self.name = name
        self.model = model
        self.role = role
        self.seed = seed
        self.driver = rng.choice(("570.172.08", "570.158.01")) if model is _H100 else "580.95.05"
        self.cores = 224 if model is _H200 else 192
        self.plim = 700.0
        self.has_psi = True
        self.inlet0 = rng.uniform(21.5, 27.5)
        self.inlet = _Lazy(_ou(random.Random(seed + ":inlet"), 1 / 900, 0.045))
        self.gpus: list[_Gpu] = []
        self.slow: list[tuple[int, int, float]] = []  # the agent's slower sampling (a CPU budget)
        self.restarts: list[tuple[int, int]] = []  # the agent restarting: nothing sampled, no events

        # figures of the current second, written by the fleet loop
        self.cpu_busy = 0.0
        self.psi_cpu = 0.0
        self.psi_io = 0.0
        self.psi_mem = 0.0


def _plan_agent(nd: _Node, seconds: int) -> None:
    rr = random.Random(nd.seed + ":agent-plan")
    for _ in range(rr.choice((0, 1, 1, 2)) * max(1, seconds // 7200 + 1)):
        a = int(rr.uniform(0, seconds))
        nd.slow.append((a, a + int(rr.uniform(180, 900)), rr.uniform(2.0, 5.0)))
    for _ in range(rr.choice((0, 1, 1, 2)) * max(1, seconds // 10800 + 1)):
        a = int(rr.uniform(300, max(301, seconds - 120)))
        nd.restarts.append((a, a + int(rr.uniform(15, 80))))
    nd.restarts.sort()


class _Gpu:
    def __init__(self, node: _Node, index: int, rng: random.Random) -> None:
        self.node = node
        self.index = index
        h = rng.getrandbits(128)
        x = f"{h:032x}"
        self.uuid = f"GPU-{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"
        self.bus = f"00000000:{_BUS_IDS[index % 8]}:00.0"
        self.seed = f"{node.seed}:gpu{index}"
        self.R = rng.uniform(0.050, 0.060)  # °C per W, die over inlet
        self.Rm = rng.uniform(0.036, 0.046)  # HBM over inlet
        self.off = rng.uniform(-1.5, 2.0) + (0.9 * index if index < 4 else 0.9 * (7 - index) + 2.0)  # airflow
        self.moff = rng.uniform(-2.0, 4.0)
        self.eff = rng.uniform(0.95, 1.06)
        self.tau_g = rng.uniform(22.0, 40.0)
        self.tau_m = rng.uniform(55.0, 95.0)
        self.sbe0 = 0 if rng.random() < 0.8 else rng.randint(1, 260)
        self.replay0 = 0 if rng.random() < 0.75 else rng.randint(1, 45)
        self.alloc: list[tuple[int, int]] = []  # planned occupancy (scheduling only)
        self.works: list[tuple[_Work, int]] = []  # (workload, rank)
        self.faults: list[_Fault] = []
        self.windows: list[tuple[int, int]] = []  # incident windows (no two overlap on one GPU)
        self.lost_at: int | None = None
        self.back_at: int | None = None
        self.benign: dict[int, tuple[int, int]] = {}  # second -> (sbe, replay) increments, normal noise

    def free(self, a: int, b: int) -> bool:
        if self.lost_at is not None and b > self.lost_at:
            return False
        return all(b <= x or a >= y for x, y in self.alloc)

    def take(self, a: int, b: int) -> None:
        self.alloc.append((a, b))

    def release(self, a: int, b: int, new_b: int) -> None:
        if (a, b) in self.alloc:
            self.alloc.remove((a, b))
            if new_b > a:
                self.alloc.append((a, new_b))

    def inc_free(self, a: int, b: int, margin: int = 300) -> bool:
        return all(b + margin <= x or a >= y + margin for x, y in self.windows)


# ---------------------------------------------------------------------------------------------
# one GPU second


class _Lat:
    """What the work and the faults make of one GPU second; physics and the agent read it."""

    __slots__ = (
        "app_clk", "blocked", "brake", "busiest", "ccpu", "ccpu_share", "climit", "dbe", "dram", "fp16",
        "fp32", "gr", "hbm_off", "mem", "node_cpu", "nvl", "occ", "p_extra", "pcpu", "plim", "proc",
        "psi_cpu", "psi_io", "r_mult", "replay", "rq", "rx", "sbe", "sleeping", "sm", "spin", "tensor",
        "tx", "util",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.proc: _Proc | None = None
        self.mem = 0.0
        self.sm = 0.0
        self.util = 0.0
        self.gr = -1.0
        self.occ = 0.0
        self.tensor = 0.0
        self.dram = 0.0
        self.fp32 = 0.0
        self.fp16 = 0.0
        self.rx = 0.0
        self.tx = 0.0
        self.nvl = 0.0
        self.spin = False
        self.pcpu = 0.0
        self.busiest = 0.0
        self.rq = 0.0
        self.blocked = 0.0
        self.sleeping = 0.0
        self.ccpu = 0.0
        self.ccpu_share = 0.0
        self.climit = 0.0
        self.node_cpu = 0.0
        self.psi_cpu = 0.0
        self.psi_io = 0.0
        self.r_mult = 1.0
        self.plim = 0.0
        self.brake = 0.0
        self.app_clk = 0.0
        self.hbm_off = 0.0
        self.p_extra = 0.0
        self.sbe = 0
        self.dbe = 0
        self.replay = 0


@dataclass(frozen=True)
class _Proc:
    pid: int
    name: str
    namespace: str
    pod: str
    container: str
    service: str


def _compute(lat: _Lat, sm: float, util: float, tfrac: float, dfrac: float, ofrac: float, rng: random.Random) -> None:
    """Fill the pipe figures of a compute phase from its SM activity."""
    sm = _clamp(sm, 0.0, 0.995)
    lat.sm = sm
    lat.util = _clamp(util, 0.0, 100.0)
    lat.tensor = sm * tfrac * (1.0 + rng.gauss(0.0, 0.03))
    lat.dram = _clamp(sm * dfrac * (1.0 + rng.gauss(0.0, 0.04)) + 0.002, 0.0, 0.95)
    lat.occ = sm * ofrac
    lat.fp32 = sm * 0.007
    lat.fp16 = sm * 0.002


# ---------------------------------------------------------------------------------------------
# workloads


@dataclass
class _Break:
    t: int  # the fault (or restart) time
    exits: list[int]  # when each rank's process exits
    back: int | None  # when the ranks start again (None: they do not)


class _Work:
    """A pod's processes on one or more GPUs over [start, end), with the breaks (crashes, restarts) in it."""

    kind = "work"
    pname = "python3"
    container = "main"

    def __init__(self, name: str, namespace: str, service: str, gpus: list[_Gpu], start: int, end: int,
                 seed: str) -> None:
        self.name = name
        self.namespace = namespace
        self.service = service
        self.gpus = gpus
        self.start = start
        self.end = end
        self.seed = seed
        self.breaks: list[_Break] = []
        self.windows: list[tuple[int, int]] = []  # work-changing incidents on the whole pod
        self.pods: list[str] = [name] * len(gpus)
        self.run_pods: list[tuple[int, str]] = []  # (from, pod name): a rolling update renames the pod
        self._runs: list[list[tuple[int, int, int]]] | None = None
        self._pids: dict[tuple[int, int], int] = {}
        for g in gpus:
            g.take(start, end)
            g.works.append((self, gpus.index(g)))

    # ---- lifetime
    def runs(self, rank: int) -> list[tuple[int, int, int]]:
        """(start, end, run index) of each process lifetime of a rank."""
        if self._runs is None:
            self._runs = [self._rank_runs(r) for r in range(len(self.gpus))]
        return self._runs[rank]

    def _rank_runs(self, rank: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        a: int | None = self.start
        idx = 0
        for br in sorted(self.breaks, key=lambda b: b.t):
            if a is None:
                break
            e = min(br.exits[rank], self.end)
            if e > a:
                out.append((a, e, idx))
            idx += 1
            a = br.back if br.back is not None and br.back < self.end else None
        if a is not None and self.end > a:
            out.append((a, self.end, idx))
        return out

    def add_break(self, br: _Break) -> None:
        self.breaks.append(br)
        self._runs = None
        if br.back is None:
            last = max(br.exits)
            for g in self.gpus:
                g.release(self.start, self.end, last)
            self.end = last

    def truncate(self, t: int) -> None:
        for g in self.gpus:
            g.release(self.start, self.end, t)
        self.end = t
        self._runs = None

    def run_at(self, rank: int, s: int) -> tuple[int, int, int] | None:
        for run in self.runs(rank):
            if run[0] <= s < run[1]:
                return run
        return None

    def steady(self, a: int, b: int, warm: int = 900) -> bool:
        """Whether every rank runs without a break over [a, b), at least ``warm`` s into its run."""
        for r in range(len(self.gpus)):
            run = self.run_at(r, a)
            if run is None or run[1] < b or a - run[0] < warm:
                return False
        return all(b <= x or a >= y for x, y in self.windows)

    def proc(self, rank: int, run: tuple[int, int, int]) -> _Proc:
        key = (rank, run[0])
        pid = self._pids.get(key)
        if pid is None:
            pid = random.Random(f"{self.seed}:pid:{rank}:{run[0]}").randint(2_000, 3_900_000)
            self._pids[key] = pid
        pod = self.pods[rank]
        for t, name in self.run_pods:
            if run[0] >= t:
                pod = name
        return _Proc(pid, self.pname, self.namespace, pod, self.container, self.service)

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        raise NotImplementedError


def _conc(f: float) -> float:
    """Kernel residency against work: concave (a half-busy step still has kernels resident most of it)."""
    f = max(f, 0.0)
    return min(1.0, 1.6 * f / (1.0 + 0.6 * f))


@dataclass
class _TrainParams:
    level: float  # SM activity in steady training
    util: float  # GPU_UTIL in steady training
    tfrac: float
    dfrac: float
    ofrac: float
    nvl: float  # NVLink bytes/s per direction (0: one GPU)
    rx: float  # input bytes/s
    wmem: float  # MiB after loading (weights, optimiser)
    amem: float  # activations and buffers once steps run
    saw: float  # MiB of the allocator's saw-tooth (0: none)
    saw_period: float
    eval_mem: float
    t_ctx: int
    t_load: int
    t_comp: int
    t_ramp: int
    load_bw: float
    eval_every: float
    eval_len: tuple[float, float]
    eval_frac: float
    ckpt_every: float
    ckpt_len: tuple[float, float]
    ckpt_style: str  # "sharded": every rank writes; "rank0": one writer, the others spin at a barrier
    hiccup_every: float
    rank_sd: float
    cpu_pod: float  # the pod's CPU (dataloader workers) per rank, cores
    climit: float
    internode: float  # PCIe bytes/s of GPUDirect RDMA to the NICs (multi-node jobs)


class _Train(_Work):
    """A synchronous data/tensor/pipeline-parallel training pod (or a one-GPU fine-tune)."""

    kind = "train"
    pname = "pt_main_thread"
    container = "pytorch"

    def __init__(self, name: str, namespace: str, service: str, gpus: list[_Gpu], start: int, end: int,
                 seed: str, p: _TrainParams, stages: int = 1, moe: bool = False) -> None:
        super().__init__(name, namespace, service, gpus, start, end, seed)
        self.p = p
        r = random.Random(seed + ":ranks")
        n = len(gpus)
        if stages > 1:  # pipeline stages: the first stage (embeddings) and the last (head, loss) differ
            per = max(1, n // stages)
            prof = [0.86 + 0.18 * (i / max(1, stages - 1)) ** 1.5 for i in range(stages)]
            self.rank_off = [prof[min(stages - 1, i // per)] * r.uniform(0.99, 1.01) for i in range(n)]
        else:
            self.rank_off = [r.uniform(0.985, 1.015) for _ in range(n)]
        self.moe = [_Lazy(_ou(random.Random(f"{seed}:moe{i}"), 1 / 120, 0.006)) for i in range(n)] if moe else None
        self.noise = _Lazy(_ou(random.Random(seed + ":noise"), 0.35, 0.018))
        self.burst = _Lazy(random.Random(seed + ":burst").random)
        self._sched: dict[int, tuple[list[int], list[tuple[int, int, str]]]] = {}
        self._ph_s = -1
        self._ph_run = -1
        self._ph = ("train", 0)
        self.launch: tuple[int, int, float] | None = None  # a launch-bound stretch (abs seconds, util)
        self.linger_from: int | None = None  # the loop has finished; the process lingers, holding memory
        # node-local rank (the writer of a rank0 checkpoint is node-local rank 0)
        self.local = [sum(1 for h in gpus[:i] if h.node is g.node) for i, g in enumerate(gpus)]
        self.per_node = {g.node.name: sum(1 for h in gpus if h.node is g.node) for g in gpus}

    def schedule(self, run: tuple[int, int, int]) -> tuple[list[int], list[tuple[int, int, str]]]:
        """The evaluation, checkpoint and hiccup phases of one run, by age (seconds since its start)."""
        got = self._sched.get(run[2])
        if got is not None:
            return got
        p = self.p
        rr = random.Random(f"{self.seed}:sched:{run[2]}")
        length = run[1] - run[0]
        ph: list[tuple[int, int, str]] = []
        base = p.t_comp + p.t_ramp
        t = base + p.eval_every * rr.uniform(0.3, 1.0)
        while t < length:
            d = rr.uniform(*p.eval_len)
            ph.append((int(t), int(t + d), "eval"))
            t += p.eval_every * rr.uniform(0.9, 1.1) + d
        t = base + p.ckpt_every * rr.uniform(0.4, 1.0)
        while t < length:
            d = rr.uniform(*p.ckpt_len)
            ph.append((int(t), int(t + d), "ckpt"))
            t += p.ckpt_every * rr.uniform(0.95, 1.05) + d
        t = base + rr.expovariate(1 / p.hiccup_every)
        while t < length:
            d = rr.uniform(2.0, 8.0)
            ph.append((int(t), int(t + d), "hiccup"))
            t += rr.expovariate(1 / p.hiccup_every) + d
        ph.sort()
        merged: list[tuple[int, int, str]] = []
        for a, b, kind in ph:  # a phase that would overlap the previous one waits for it
            if merged and a < merged[-1][1]:
                shift = merged[-1][1] - a + 5
                a, b = a + shift, b + shift
            merged.append((a, b, kind))
        got = ([x[0] for x in merged], merged)
        self._sched[run[2]] = got
        return got

    def phase(self, run: tuple[int, int, int], age: int) -> tuple[str, int]:
        """The shared phase of the pod at ``age``, and how far into the phase it is."""
        starts, ph = self.schedule(run)
        i = bisect.bisect_right(starts, age) - 1
        if i >= 0 and age < ph[i][1]:
            return ph[i][2], age - ph[i][0]
        return "train", 0

    def had_eval(self, run: tuple[int, int, int], age: int) -> bool:
        starts, ph = self.schedule(run)
        return any(kind == "eval" and b <= age for a, b, kind in ph[: bisect.bisect_right(starts, age)])

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        p = self.p
        age = s - run[0]
        lat.climit = p.climit
        lat.ccpu = p.cpu_pod * self.per_node[self.gpus[rank].node.name]
        if age < p.t_ctx:  # CUDA and NCCL initialise
            lat.mem = 520.0 + 40.0 * (age / max(1, p.t_ctx))
            lat.pcpu, lat.busiest, lat.sleeping = 1.05, 0.97, 0.01
            lat.ccpu = 1.5
            lat.ccpu_share = lat.ccpu / self.per_node[self.gpus[rank].node.name]
            lat.rx = 4e5
            return
        if age < p.t_load:  # weights and optimiser state from storage
            frac = (age - p.t_ctx) / max(1, p.t_load - p.t_ctx)
            lat.mem = 560.0 + frac * p.wmem
            lat.rx = p.load_bw * rng.uniform(0.6, 1.3)
            lat.tx = lat.rx * 0.02
            lat.pcpu, lat.busiest, lat.sleeping, lat.blocked = 1.3, 0.55, 0.4, float(rng.randint(1, 4))
            lat.ccpu = 2.5
            lat.ccpu_share = lat.ccpu / self.per_node[self.gpus[rank].node.name]
            lat.util = 2.0 if rng.random() < 0.2 else 0.0
            lat.sm = 0.002 * lat.util
            return
        lat.mem = 560.0 + p.wmem
        if age < p.t_comp:  # torch.compile / autotuning: the CPU compiles, the GPU runs short trials
            if self.burst.at(s) < 0.12:
                _compute(lat, rng.uniform(0.2, 0.75), rng.uniform(55, 100), p.tfrac, p.dfrac, p.ofrac, rng)
            else:
                lat.util = 0.0
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.99, 0.005
            lat.ccpu = 1.2
            lat.ccpu_share = lat.ccpu / self.per_node[self.gpus[rank].node.name]
            return
        steps = age - p.t_comp
        lat.mem += p.amem * min(1.0, steps / 25.0)
        if p.saw > 0.0:
            lat.mem += p.saw * ((steps % p.saw_period) / p.saw_period) ** 0.8
        if p.eval_mem > 0 and self.had_eval(run, age):
            lat.mem += p.eval_mem
        if self.linger_from is not None and s >= self.linger_from:
            lat.pcpu, lat.busiest, lat.sleeping = 0.02, 0.01, 0.99
            lat.ccpu = 0.05
            lat.ccpu_share = lat.ccpu
            lat.rx, lat.tx = 1.5e5, 3e5
            return
        if self.launch is not None and self.launch[0] <= s < self.launch[1]:
            _launch_bound(lat, self.launch[2], rng)
            lat.ccpu = lat.pcpu + 0.3
            lat.ccpu_share = lat.ccpu
            return
        ramp = 0.35 + 0.65 * min(1.0, steps / max(1, p.t_ramp))
        if s != self._ph_s or run[2] != self._ph_run:
            self._ph_s, self._ph_run = s, run[2]
            self._ph = self.phase(run, age)
        kind, into = self._ph
        shared = self.noise.at(s)
        off = self.rank_off[rank]
        if self.moe is not None:
            off *= 1.0 + self.moe[rank].at(s)
        f = ramp * wm * (1.0 + shared) * off * (1.0 + rng.gauss(0.0, p.rank_sd))
        share = self.per_node[self.gpus[rank].node.name]
        io = 0.25 + 0.75 * _clamp(wm, 0.0, 1.0)
        if kind == "ckpt":
            writer = p.ckpt_style == "sharded" or self.local[rank] == 0
            if writer:
                lat.sm = rng.uniform(0.0, 0.006)
                lat.util = float(rng.choice((0, 0, 1, 2, 3)))
                lat.tx = rng.uniform(1.5e9, 5.5e9) if p.ckpt_style == "sharded" else rng.uniform(3e9, 9e9)
                lat.rx = rng.uniform(2e5, 1.2e6)
                lat.dram = rng.uniform(0.01, 0.04)
                lat.pcpu, lat.busiest, lat.sleeping, lat.blocked = 1.4, 0.6, 0.35, float(rng.randint(0, 6))
            else:  # waits for the writer inside a collective: a spinning NCCL kernel
                lat.spin = True
                lat.sm = rng.uniform(0.006, 0.013)
                lat.occ = lat.sm * 0.015
                lat.util = 100.0
                lat.gr = rng.uniform(0.995, 0.9995)
                lat.rx, lat.tx = rng.uniform(1e5, 3e5), rng.uniform(3e5, 5e5)
                lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.98, 0.01
            lat.ccpu = 0.6 * p.cpu_pod * share
            lat.ccpu_share = lat.ccpu / share
            return
        if kind == "eval":
            f *= p.eval_frac
            _compute(lat, p.level * f, p.util * _clamp(0.55 + 0.3 * f / p.eval_frac, 0, 1) * io,
                     p.tfrac * 0.9, p.dfrac * 1.3, p.ofrac, rng)
            lat.nvl = p.nvl * 0.15 * f
        else:
            if kind == "hiccup":  # the data loader is late for a few steps
                f *= 0.05 + 0.25 * (into % 3) / 2.0
            _compute(lat, p.level * f, p.util * _conc(f), p.tfrac, p.dfrac, p.ofrac, rng)
            lat.nvl = p.nvl * min(1.2, f) * (1.0 + rng.gauss(0.0, 0.05))
        lat.rx = 3e5 + p.rx * min(1.2, f) * rng.uniform(0.7, 1.3) + p.internode * min(1.1, f) * rng.uniform(0.85, 1.1)
        lat.tx = 6e5 + p.rx * 0.1 * f + p.internode * min(1.1, f) * rng.uniform(0.85, 1.1)
        lat.pcpu = (1.15 + 0.45 * min(1.0, f)) * rng.uniform(0.95, 1.05)
        lat.busiest = _clamp(0.55 + 0.4 * min(1.0, f) + rng.gauss(0.0, 0.02), 0.0, 1.0)
        lat.sleeping = _clamp(1.0 - lat.busiest - 0.02, 0.0, 1.0)
        lat.rq = rng.uniform(0.02, 0.25)
        lat.ccpu = p.cpu_pod * share * io * rng.uniform(0.93, 1.07)
        lat.ccpu_share = lat.ccpu / share


def _launch_bound(lat: _Lat, util: float, rng: random.Random) -> None:
    """A CPU thread launching tiny kernels: kernels resident much of the time, SMs nearly idle."""
    lat.util = _clamp(util + rng.gauss(0.0, 4.0), 5.0, 100.0)
    lat.sm = rng.uniform(0.0002, 0.004) * (1.0 + util / 50.0)
    lat.gr = lat.util / 100.0 * rng.uniform(0.97, 1.02)
    lat.occ = lat.sm * 0.05
    lat.tensor = lat.sm * 0.006
    lat.dram = rng.uniform(3e-6, 1e-4)
    lat.fp32 = lat.sm * 0.011
    lat.fp16 = 0.0
    lat.rx = rng.uniform(1.2e8, 2.6e8) * util / 30.0
    lat.tx = lat.rx * rng.uniform(0.1, 0.13)
    lat.nvl = 0.0
    lat.pcpu = rng.uniform(1.0, 1.08)
    lat.busiest = rng.uniform(0.985, 1.0)
    lat.sleeping = rng.uniform(0.0, 0.004)
    lat.rq = rng.uniform(0.0, 0.002)


class _Etl(_Work):
    """A batch embedding/ETL job: compute-bound, memory-bound and copy-bound phases, and CPU gaps."""

    kind = "etl"
    container = "worker"

    def __init__(self, name: str, namespace: str, service: str, gpus: list[_Gpu], start: int, end: int,
                 seed: str) -> None:
        super().__init__(name, namespace, service, gpus, start, end, seed)
        rr = random.Random(seed + ":phases")
        self.base = rr.uniform(6000, 22000)
        self.extra = {"compute": rr.uniform(2000, 9000), "mem": rr.uniform(3000, 12000), "copy": rr.uniform(500, 2500)}
        ph: list[tuple[int, int, str]] = []
        t = start + rr.randint(20, 60)
        while t < end:
            kind = rr.choices(("compute", "mem", "copy", "cpu"), (0.42, 0.25, 0.23, 0.10))[0]
            d = {"compute": (120, 420), "mem": (60, 240), "copy": (45, 200), "cpu": (20, 90)}[kind]
            n = rr.randint(*d)
            ph.append((t, t + n, kind))
            t += n
        self.ph = ph
        self.starts = [x[0] for x in ph]
        self.level = rr.uniform(0.72, 0.9)

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        i = bisect.bisect_right(self.starts, s) - 1
        age = s - run[0]
        lat.climit = 16.0
        mem = self.base * min(1.0, age / 15.0) + 500.0
        if i < 0 or age < 20:
            lat.mem = mem
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.9, 0.05
            lat.ccpu = lat.ccpu_share = 2.0
            return
        for a, _b, kind in self.ph[: i + 1]:  # the caching allocator keeps the high-water mark
            if a <= s:
                mem = max(mem, self.base + 500.0 + self.extra.get(kind, 0.0))
        lat.mem = mem
        kind = self.ph[i][2]
        if kind == "compute":
            _compute(lat, self.level * wm * rng.uniform(0.94, 1.04), 97.0 * _conc(wm) + rng.gauss(0, 1.5),
                     0.7, 0.32, 0.42, rng)
            lat.rx, lat.tx = rng.uniform(2e7, 6e7), rng.uniform(3e6, 9e6)
            lat.pcpu, lat.busiest, lat.sleeping = 1.2, 0.8, 0.12
        elif kind == "mem":
            _compute(lat, rng.uniform(0.88, 0.985) * wm, 99.0 * _conc(wm), 0.01, 0.9, 0.8, rng)
            lat.rx, lat.tx = rng.uniform(1.5e7, 2.2e7), rng.uniform(5e6, 8e6)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.97, 0.02
        elif kind == "copy":  # host -> device staging: the copy engines work, the SMs wait
            lat.sm = rng.uniform(0.008, 0.035)
            lat.util = rng.uniform(8.0, 28.0)
            lat.occ = lat.sm * 0.3
            lat.tensor = lat.sm * 0.2
            lat.dram = rng.uniform(0.04, 0.11)
            lat.rx = rng.uniform(9e9, 2.0e10)
            lat.tx = rng.uniform(4e8, 1.4e9)
            lat.pcpu, lat.busiest, lat.sleeping = 2.2, 0.98, 0.01
        else:  # the CPU prepares the next shard
            lat.util = 0.0
            lat.rx, lat.tx = 2e5, 4e5
            lat.pcpu, lat.busiest, lat.sleeping, lat.blocked = 1.0, 0.95, 0.03, float(rng.randint(0, 3))
        lat.ccpu = lat.pcpu + rng.uniform(3.0, 8.0)
        lat.ccpu_share = lat.ccpu


class _Notebook(_Work):
    """An interactive session: a model loaded, cells run now and then; ``idle_from``: the user left."""

    kind = "notebook"
    container = "notebook"

    def __init__(self, name: str, namespace: str, service: str, gpus: list[_Gpu], start: int, end: int,
                 seed: str, idle_from: int | None = None, max_gap: int = 420) -> None:
        super().__init__(name, namespace, service, gpus, start, end, seed)
        rr = random.Random(seed + ":cells")
        self.pname = "python"
        self.idle_from = idle_from
        self.mem = rr.uniform(9000, 0.6 * gpus[0].node.model.total)
        self.load_at = start + rr.randint(60, 240)
        cells: list[tuple[int, int, float]] = []
        t = self.load_at + rr.randint(30, 120)
        stop = idle_from if idle_from is not None else end
        while t < stop:
            d = int(rr.choice((rr.uniform(5, 40), rr.uniform(30, 160))))
            if t + d > stop:
                break
            cells.append((t, t + d, rr.uniform(0.15, 0.9)))
            t += d + rr.randint(40, max_gap)
        if idle_from is not None:  # the last cell ran right up to the moment the user left
            if cells and cells[-1][1] < idle_from - 5:
                cells.append((idle_from - rr.randint(20, 60), idle_from, rr.uniform(0.2, 0.7)))
            elif not cells:
                cells.append((max(self.load_at + 20, idle_from - 40), idle_from, 0.4))
        self.cells = cells
        self.starts = [c[0] for c in cells]
        self.launch: tuple[int, int, float] | None = None

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        lat.climit = 8.0
        lat.mem = 300.0 if s < self.load_at else self.mem
        lat.pcpu, lat.busiest, lat.sleeping = 0.03, 0.02, 0.97
        lat.ccpu = lat.ccpu_share = 0.15
        lat.rx, lat.tx = 1.2e5, 3.5e5
        if self.load_at <= s < self.load_at + 25:
            lat.rx = rng.uniform(1.5e9, 4e9)
            lat.mem = self.mem * (s - self.load_at) / 25.0 + 300.0
            return
        if self.launch is not None and self.launch[0] <= s < self.launch[1]:
            _launch_bound(lat, self.launch[2], rng)
            lat.ccpu = lat.ccpu_share = lat.pcpu + 0.2
            return
        i = bisect.bisect_right(self.starts, s) - 1
        if i >= 0 and s < self.cells[i][1]:
            x = self.cells[i][2] * rng.uniform(0.85, 1.1) * wm
            _compute(lat, x, 100.0 * _conc(x * 1.3), 0.55, 0.35, 0.3, rng)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.95, 0.03
            lat.ccpu = lat.ccpu_share = 1.3


# ---- serving


class _Service:
    """A served model: demand (a compressed day, a slow trend, flash crowds), routing, an autoscaler."""

    def __init__(self, name: str, kind: str, tp: int, seconds: int, seed: str, scale: float) -> None:
        self.name = name
        self.kind = kind  # "vllm" | "tei"
        self.tp = tp
        self.seed = seed
        rr = random.Random(seed + ":demand")
        self.replicas: list[_Replica] = []
        minutes = seconds // 60 + 3
        period = rr.uniform(95, 170)  # minutes in a "day"
        phase = rr.random()
        trend = rr.uniform(-0.25, 0.3)
        base = scale * (rr.uniform(1.6, 2.4) if kind == "vllm" else rr.uniform(0.7, 1.1))
        flashes = [(rr.uniform(15, minutes), rr.uniform(0.4, 1.3), rr.uniform(0.5, 2.0), rr.uniform(3.0, 12.0))
                   for _ in range(rr.choice((0, 1, 1, 2)) * max(1, minutes // 180))]
        ou = _ou(rr, 1 / 25, 0.05)
        burst_on = False
        burst_left = rr.uniform(5, 20)
        d: array[float] = array("d")
        for m in range(minutes + 1):
            phi = (m / period + phase) % 1.0
            x = base * _day(phi) * (1.0 + trend * m / max(1, minutes)) * math.exp(ou())
            for m0, peak, rise, tau in flashes:
                if m >= m0:
                    x *= 1.0 + peak * min(1.0, (m - m0) / rise) * math.exp(-max(0.0, m - m0 - rise) / tau)
            if kind == "tei":  # batch callers: on/off bursts over a thin online stream
                burst_left -= 1
                if burst_left <= 0:
                    burst_on = not burst_on
                    burst_left = rr.uniform(3, 15) if burst_on else rr.uniform(5, 25)
                x = x * 0.25 + (scale * rr.uniform(0.9, 1.4) if burst_on else 0.0)
            d.append(max(0.04 * scale, x))
        self.d = d
        self.sec = _Lazy(_ou(random.Random(seed + ":sec"), 0.3, 0.03 if kind == "vllm" else 0.09))
        self._memo_s = -1
        self._memo: dict[int, float] = {}
        self.target = rr.uniform(0.55, 0.68)

    def demand_min(self, m: float) -> float:
        i = int(max(0.0, m))
        i = min(i, len(self.d) - 2)
        fr = _clamp(m - i, 0.0, 1.0)
        return self.d[i] * (1 - fr) + self.d[i + 1] * fr

    def demand(self, s: int) -> float:
        return self.demand_min(s / 60.0) * max(0.2, 1.0 + self.sec.at(s))

    def load(self, s: int, rep: _Replica) -> float:
        """The replica's load in replica capacities (1: saturated), from the service's demand and routing."""
        if s != self._memo_s:
            self._memo_s = s
            dem = self.demand(s)
            memo: dict[int, float] = {}
            canary = 0.0
            shares: list[tuple[_Replica, float]] = []
            for r in self.replicas:
                f = r.routable(s)
                if f <= 0.0:
                    continue
                if r.canary > 0.0:
                    canary += r.canary * f
                    memo[id(r)] = dem * r.canary * f
                else:
                    shares.append((r, f * r.weight(s)))
            total = sum(w for _r, w in shares)
            for r, w in shares:
                memo[id(r)] = dem * (1.0 - canary) * w / total if total > 0 else 0.0
            self._memo = memo
        return self._memo.get(id(rep), 0.0)


def _day(phi: float) -> float:
    """A compressed day of interactive demand: morning ramp, a lunch dip, an afternoon peak, a late shoulder."""
    def bump(c: float, w: float) -> float:
        d = abs(phi - c)
        d = min(d, 1.0 - d)
        return math.exp(-0.5 * (d / w) ** 2)
    return 0.3 + 0.7 * min(1.0, 0.95 * bump(0.36, 0.085) + 0.85 * bump(0.6, 0.11) + 0.4 * bump(0.83, 0.05)
                           + 0.2 * bump(0.48, 0.22))


class _Replica(_Work):
    """One serving replica (vLLM, or a text-embeddings server) of a service, on ``tp`` GPUs."""

    kind = "replica"

    def __init__(self, svc: _Service, pod: str, gpus: list[_Gpu], start: int, end: int, seed: str,
                 canary: float = 0.0) -> None:
        super().__init__(pod, "inference", svc.name, gpus, start, end, seed)
        self.svc = svc
        self.container = "vllm" if svc.kind == "vllm" else "tei"
        self.pname = "python3" if svc.kind == "vllm" else "text-embeddings"
        self.canary = canary
        self.drain_at: int | None = None
        self.drain_len = 120
        self.orphan_from: int | None = None
        rr = random.Random(seed + ":replica")
        model = gpus[0].node.model
        if svc.kind == "vllm":
            self.weights = rr.uniform(0.22, 0.5) * model.total
            self.prealloc = 0.9 * model.total - rr.uniform(8, 40)
        else:
            self.weights = rr.uniform(1300, 2600)
            self.prealloc = 0.0
        self.t_ctx = rr.randint(4, 10)
        self.t_load = self.t_ctx + rr.randint(20, 90)
        self.t_prof = self.t_load + rr.randint(5, 12)
        self.t_graph = self.t_prof + (rr.randint(15, 50) if svc.kind == "vllm" else 3)
        self.load_bw = rr.uniform(1.2e9, 3.5e9)
        # routing weight per minute: sticky sessions wander, prefix-aware routing moves in steps
        m0 = max(0, start // 60)
        m1 = min(len(svc.d), end // 60 + 2)
        ou = _ou(rr, 1 / 15, 0.07, rr.gauss(0.0, 0.15))
        level = 0.0
        w: array[float] = array("d")
        for _ in range(m0, m1 + 1):
            if rr.random() < 1 / 35:
                level = _clamp(level + rr.choice((-1, 1)) * rr.uniform(0.25, 0.45), -0.6, 0.5)
            w.append(math.exp(ou() + level))
        self.w0 = m0
        self.w = w
        self.prefill = _Lazy(_ou(random.Random(seed + ":prefill"), 1 / 200, 0.01, 0.0))
        self.hw_steps: list[tuple[int, float]] = []  # a TEI server's allocator high-water mark
        if svc.kind == "tei":
            t: float = start + rr.randint(60, 200)
            gap = rr.uniform(60, 180)
            for _ in range(rr.randint(3, 6)):
                self.hw_steps.append((int(t), rr.uniform(120, 700) / (1 + len(self.hw_steps))))
                t += gap
                gap *= rr.uniform(1.8, 2.6)

    def weight(self, s: int) -> float:
        i = s // 60 - self.w0
        i = int(_clamp(i, 0, len(self.w) - 1))
        return self.w[i]

    def ready(self, run: tuple[int, int, int], s: int) -> bool:
        return s - run[0] >= self.t_graph or run[0] < -3600

    def routable(self, s: int) -> float:
        """Its share of the service's traffic, 0-1: 0 while absent, warming up or orphaned, ramped while draining."""
        run = self.run_at(0, s)
        if run is None or not self.ready(run, s):
            return 0.0
        if self.orphan_from is not None and s >= self.orphan_from:
            return 0.0
        if self.drain_at is not None and s >= self.drain_at:
            return max(0.0, 1.0 - (s - self.drain_at) / (self.drain_len - 25))
        return 1.0

    def steady(self, a: int, b: int, warm: int = 900) -> bool:
        if not super().steady(a, b, warm):
            return False
        if self.drain_at is not None and self.drain_at < b + 60:
            return False
        return self.orphan_from is None or self.orphan_from > b

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        age = s - run[0] if run[0] > -3600 else 10**6
        lat.climit = 16.0 if self.svc.kind == "vllm" else 8.0
        lat.ccpu = lat.ccpu_share = 0.4
        lat.pcpu, lat.busiest, lat.sleeping = 0.1, 0.08, 0.9
        if age < self.t_ctx:
            lat.mem = 500.0
            return
        if age < self.t_load:
            lat.mem = 500.0 + self.weights * (age - self.t_ctx) / (self.t_load - self.t_ctx)
            lat.rx = self.load_bw * rng.uniform(0.7, 1.2)
            lat.pcpu, lat.busiest, lat.sleeping, lat.blocked = 1.1, 0.6, 0.35, float(rng.randint(1, 5))
            lat.ccpu = lat.ccpu_share = 1.6
            return
        if age < self.t_prof:  # the profiling forward pass at the largest batch
            lat.mem = 500.0 + self.weights * 1.08
            _compute(lat, rng.uniform(0.55, 0.9), 99.0, 0.75, 0.35, 0.3, rng)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.97, 0.02
            return
        lat.mem = self.prealloc if self.prealloc > 0 else 500.0 + self.weights * 1.1
        for t, dm in self.hw_steps:
            if s >= t:
                lat.mem += dm
        if age < self.t_graph:  # CUDA graph capture, batch size by batch size
            if rng.random() < 0.55:
                _compute(lat, rng.uniform(0.08, 0.4), rng.uniform(20, 65), 0.5, 0.5, 0.2, rng)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.96, 0.03
            return
        lam = self.svc.load(s, self) * (1.0 + rng.gauss(0.0, 0.05))
        lam = max(0.0, lam)
        if self.svc.kind == "vllm":
            busy = (1.0 - math.exp(-2.2 * lam)) * wm
            sb = 0.3 + 0.55 * (1.0 - math.exp(-1.5 * lam))
            pre = _clamp(0.3 + self.prefill.at(s), 0.08, 0.65)
            sm = busy * sb * (1.0 + rng.gauss(0.0, 0.04))
            lat.sm = _clamp(sm, 0.0, 0.95)
            lat.util = _clamp(100.0 * min(1.0, busy * 1.1) + rng.gauss(0.0, 2.0), 0.0, 100.0) if busy > 0.01 else 0.0
            lat.tensor = lat.sm * (0.42 + 0.4 * pre)
            lat.dram = _clamp(busy * (0.36 + 0.36 * (1.0 - pre)) * (1.0 + rng.gauss(0.0, 0.04)), 0.0, 0.92)
            lat.occ = lat.sm * rng.uniform(0.17, 0.23)
            lat.fp32 = lat.sm * 0.03
            lat.nvl = busy * 2.4e10 * (1.0 + rng.gauss(0.0, 0.08)) if self.svc.tp > 1 else 0.0
            lat.rx = 1.5e6 + busy * 2.8e7 * rng.uniform(0.7, 1.3)
            lat.tx = 8e5 + busy * 5e6 * rng.uniform(0.7, 1.3)
        else:
            busy = (1.0 - math.exp(-2.5 * lam)) * wm
            _compute(lat, busy * 0.82 * rng.uniform(0.93, 1.05), 100.0 * min(1.0, busy * 1.05), 0.75, 0.3, 0.45, rng)
            lat.rx = 1e6 + busy * 6e7 * rng.uniform(0.7, 1.3)
            lat.tx = 5e5 + busy * 3e7 * rng.uniform(0.7, 1.3)
        lat.pcpu = 0.2 + 1.0 * busy
        lat.busiest = _clamp(0.15 + 0.72 * busy + rng.gauss(0.0, 0.02), 0.0, 1.0)
        lat.sleeping = _clamp(1.0 - lat.busiest - 0.01, 0.0, 1.0)
        lat.rq = rng.uniform(0.0, 0.003)
        lat.ccpu = lat.ccpu_share = lat.pcpu + 0.3 + 1.2 * busy


class _BatchInfer(_Work):
    """Offline batch inference with vLLM: a saturated engine, memory pre-allocated."""

    kind = "batch"
    container = "vllm"

    def __init__(self, name: str, namespace: str, service: str, gpus: list[_Gpu], start: int, end: int,
                 seed: str) -> None:
        super().__init__(name, namespace, service, gpus, start, end, seed)
        rr = random.Random(seed + ":b")
        total = gpus[0].node.model.total
        self.weights = rr.uniform(0.1, 0.4) * total
        self.prealloc = rr.choice((0.85, 0.9, 0.92)) * total
        self.t_ready = rr.randint(60, 150)
        self.mix = _Lazy(_ou(random.Random(seed + ":mix"), 1 / 60, 0.02))

    def fill(self, s: int, rank: int, run: tuple[int, int, int], lat: _Lat, rng: random.Random, wm: float) -> None:
        age = s - run[0]
        lat.climit = 8.0
        if age < self.t_ready - 30:
            lat.mem = 500 + self.weights * min(1.0, age / max(1.0, self.t_ready - 40))
            lat.rx = rng.uniform(1e9, 3e9)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.7, 0.3
            lat.ccpu = lat.ccpu_share = 1.5
            return
        lat.mem = self.prealloc
        if age < self.t_ready:
            if rng.random() < 0.5:
                _compute(lat, rng.uniform(0.1, 0.5), rng.uniform(30, 80), 0.5, 0.5, 0.2, rng)
            lat.pcpu, lat.busiest, lat.sleeping = 1.0, 0.97, 0.02
            lat.ccpu = lat.ccpu_share = 1.2
            return
        pre = _clamp(0.35 + self.mix.at(s), 0.05, 0.8)
        sm = (0.62 + 0.25 * pre) * wm * rng.uniform(0.95, 1.04)
        _compute(lat, sm, 99.0 * _conc(wm) + rng.gauss(0, 0.8), 0.45 + 0.35 * pre, 0.95 - 0.5 * pre, 0.22, rng)
        lat.rx, lat.tx = rng.uniform(3e6, 1e7), rng.uniform(1e6, 4e6)
        lat.pcpu, lat.busiest, lat.sleeping = 1.5, 0.92, 0.05
        lat.ccpu = lat.ccpu_share = 3.0


# ---------------------------------------------------------------------------------------------
# faults


class _Fault:
    """Something wrong with one GPU (or done to it) from ``onset`` until ``until``."""

    def __init__(self, onset: int, until: int) -> None:
        self.onset = onset
        self.until = until

    def work(self, s: int) -> float:
        return 1.0

    def apply(self, s: int, lat: _Lat) -> None:
        return None


class _WorkDrop(_Fault):
    """Less work done per second with the process alive: input stalls, drifts, host starvation, waiting peers."""

    def __init__(self, onset: int, until: int, depth: float, ramp: float = 0.0, host: str = "",
                 spin: bool = False, seed: str = "") -> None:
        super().__init__(onset, until)
        self.depth = depth
        self.ramp = ramp
        self.host = host
        self.spin = spin
        self.wobble = _Lazy(_ou(random.Random(seed + ":wobble"), 0.08, 0.03))

    def frac(self, s: int) -> float:
        if self.ramp > 0:
            return min(1.0, (s - self.onset) / self.ramp)
        return 1.0

    def work(self, s: int) -> float:
        return _clamp(1.0 - self.depth * self.frac(s) + self.wobble.at(s - self.onset), 0.02, 1.2)

    def apply(self, s: int, lat: _Lat) -> None:
        if lat.proc is None:
            return
        x = self.depth * self.frac(s)
        if self.host == "io":  # waiting for the data loader, which waits for storage
            lat.sleeping = _clamp(lat.sleeping + 0.7 * x, 0.0, 0.97)
            lat.busiest = _clamp(1.0 - lat.sleeping - 0.02, 0.02, 1.0)
            lat.psi_io = max(lat.psi_io, 0.25 + 0.5 * x)
            lat.blocked = max(lat.blocked, 2.0 + 8.0 * x)
        elif self.host == "cpu":  # a neighbour eats the node's CPUs; the engine loop waits to run
            lat.rq = max(lat.rq, 0.6 + 2.5 * x)
            lat.psi_cpu = max(lat.psi_cpu, 0.35 + 0.5 * x)
            lat.node_cpu = max(lat.node_cpu, 0.6)
            lat.busiest = _clamp(lat.busiest * (1 - 0.4 * x), 0.0, 1.0)
        elif self.host == "slow":  # a slowly worsening input path
            lat.sleeping = _clamp(lat.sleeping + 0.6 * x, 0.0, 0.95)
            lat.busiest = _clamp(1.0 - lat.sleeping - 0.02, 0.02, 1.0)
        if self.spin and lat.sm > 0.02:  # peers of a straggler wait inside the collective
            lat.util = max(lat.util, 96.0)
            lat.gr = max(lat.gr, 0.97)


class _Leak(_Fault):
    """Device memory that is allocated and never freed; held until the process exits."""

    def __init__(self, onset: int, end: int, until: int, rate: float, steps: float) -> None:
        super().__init__(onset, until)
        self.end = end
        self.rate = rate  # MiB/s
        self.steps = steps  # MiB per step (0: smooth, 2 MiB granularity)

    def leaked(self, s: int) -> float:
        x = self.rate * (min(s, self.end) - self.onset)
        if self.steps > 0:
            return self.steps * math.floor(x / self.steps)
        return 2.0 * math.floor(x / 2.0)

    def apply(self, s: int, lat: _Lat) -> None:
        if lat.proc is not None:
            lat.mem += self.leaked(s)


class _Cooling(_Fault):
    """A cooling fault: the die's thermal resistance rises (a fan, a cold plate, a blocked duct)."""

    def __init__(self, onset: int, until: int, mult: float, ramp: float) -> None:
        super().__init__(onset, until)
        self.mult = mult
        self.ramp = ramp

    def apply(self, s: int, lat: _Lat) -> None:
        lat.r_mult = 1.0 + (self.mult - 1.0) * min(1.0, (s - self.onset) / self.ramp)


class _PowerLimit(_Fault):
    def __init__(self, onset: int, until: int, limit: float) -> None:
        super().__init__(onset, until)
        self.limit = limit

    def apply(self, s: int, lat: _Lat) -> None:
        lat.plim = self.limit


class _Brake(_Fault):
    def __init__(self, onset: int, until: int, clk: float) -> None:
        super().__init__(onset, until)
        self.clk = clk

    def apply(self, s: int, lat: _Lat) -> None:
        lat.brake = self.clk


class _AppClock(_Fault):
    def __init__(self, onset: int, until: int, clk: float) -> None:
        super().__init__(onset, until)
        self.clk = clk

    def apply(self, s: int, lat: _Lat) -> None:
        lat.app_clk = self.clk


class _HbmHot(_Fault):
    def __init__(self, onset: int, until: int, off: float, ramp: float, fall: float) -> None:
        super().__init__(onset, until)
        self.off = off
        self.ramp = ramp
        self.fall = fall

    def apply(self, s: int, lat: _Lat) -> None:
        x = min(1.0, (s - self.onset) / self.ramp)
        left = self.until - s
        if left < self.fall:
            x *= max(0.0, left / self.fall)
        lat.hbm_off = self.off * x


class _Counts(_Fault):
    """Counter increments at given seconds (ECC, PCIe replays)."""

    def __init__(self, onset: int, until: int, what: str, at: dict[int, int]) -> None:
        super().__init__(onset, until)
        self.what = what
        self.at = at

    def apply(self, s: int, lat: _Lat) -> None:
        n = self.at.get(s, 0)
        if n:
            if self.what == "sbe":
                lat.sbe += n
            elif self.what == "dbe":
                lat.dbe += n
            else:
                lat.replay += n


class _LaunchOverlay(_Fault):
    def __init__(self, onset: int, until: int, util: float) -> None:
        super().__init__(onset, until)
        self.util = util

    def apply(self, s: int, lat: _Lat) -> None:
        if lat.proc is not None:
            _launch_bound(lat, self.util, _LAUNCH_RNG)


_LAUNCH_RNG = random.Random(0)  # reseeded per GPU second by the simulator (see _Sim.step)


# ---------------------------------------------------------------------------------------------
# the simulator of one GPU


class _Sim:
    """One GPU, second by second: its work, faults, power, clocks, temperatures and counters."""

    def __init__(self, gpu: _Gpu, t0: float) -> None:
        self.g = gpu
        self.t0 = t0
        self.rng = random.Random(gpu.seed + ":sim")
        self.lat = _Lat()
        segs: list[tuple[int, int, _Work, int, tuple[int, int, int]]] = []
        for w, rank in gpu.works:
            for run in w.runs(rank):
                segs.append((run[0], run[1], w, rank, run))
        segs.sort(key=lambda x: x[0])
        self.segs = segs
        self.si = 0
        self.faults = sorted(gpu.faults, key=lambda f: f.onset)
        m = gpu.node.model
        self.model = m
        inlet = gpu.node.inlet0
        self.tg = inlet + gpu.off + gpu.R * m.idle_w
        self.tm = inlet + gpu.moff + gpu.Rm * m.idle_w
        self.therm_cap = _FMAX
        self.idle_for = 100
        self.energy = float(random.Random(gpu.seed + ":e").randint(10**9, 9 * 10**10))
        self.sbe = gpu.sbe0
        self.dbe = 0
        self.replay = gpu.replay0
        # the figures of the last second
        self.power = m.idle_w
        self.clk = _IDLE_CLK
        self.reasons = R_IDLE
        self.plim = gpu.node.plim
        self.util = 0.0
        self.dram_now = 0.0
        self.mem = 0.0
        self.proc: _Proc | None = None
        self.prev_proc: _Proc | None = None
        self.host = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        # sums since the agent's last sample (GPM and rate figures are means over the interval)
        self.acc = [0.0] * 16
        self.n = 0
        self.alive = True

    def warm(self, seconds: int = 300) -> None:
        """Run the seconds before the trace, so that a GPU busy for hours is already at its temperature."""
        for s in range(-seconds, 0):
            self.step(s)
        self.acc = [0.0] * 16
        self.n = 0

    def step(self, s: int) -> None:
        g = self.g
        if g.lost_at is not None and s >= g.lost_at and (g.back_at is None or s < g.back_at):
            self.alive = False
            return
        if not self.alive:  # back after a reset: volatile ECC counts start again from zero
            self.alive = True
            self.sbe = 0
            self.dbe = 0
            self.n = 0
            self.acc = [0.0] * 16
        lat = self.lat
        lat.reset()
        rng = self.rng
        segs = self.segs
        while self.si < len(segs) and segs[self.si][1] <= s:
            self.si += 1
        wm = 1.0
        active: list[_Fault] = []
        for f in self.faults:
            if f.onset <= s < f.until:
                active.append(f)
                wm *= f.work(s)
        if self.si < len(segs) and segs[self.si][0] <= s:
            _a, _b, w, rank, run = segs[self.si]
            lat.proc = w.proc(rank, run)
            w.fill(s, rank, run, lat, rng, wm)
        if active:
            _LAUNCH_RNG.seed(f"{g.seed}:{s}")
            for f in active:
                f.apply(s, lat)
        b = g.benign.get(s)
        if b is not None:
            lat.sbe += b[0]
            lat.replay += b[1]
        self._physics(s, lat)

    def _physics(self, s: int, lat: _Lat) -> None:
        g = self.g
        m = self.model
        rng = self.rng
        has = lat.proc is not None
        if has:
            self.idle_for = 0
        else:
            self.idle_for += 1
        sm = lat.sm
        dyn = g.eff * (470.0 * sm + 560.0 * lat.tensor + 70.0 * lat.dram + 2.0e-10 * lat.nvl)
        if lat.spin:
            dyn += 25.0
        if has:
            base = m.ctx_w + rng.gauss(0.0, 1.2)
        elif self.idle_for < 12:
            base = m.ctx_w - 15.0
        else:
            base = m.idle_w + rng.gauss(0.0, 0.4)
        base += lat.p_extra
        limit = lat.plim if lat.plim > 0 else g.node.plim
        reasons = 0
        busy = has and (sm > 0.004 or lat.util > 0)
        if busy or has:
            req = lat.app_clk if lat.app_clk > 0 else _FMAX
            if lat.app_clk > 0:
                reasons |= R_APP
        else:
            req = _FMAX if self.idle_for < 10 else (705.0 if self.idle_for < 25 else _IDLE_CLK)
            if self.idle_for >= 10:
                reasons |= R_IDLE
        clk = req
        p_dem = base + dyn * (req / _FMAX) ** _PWR_EXP
        if busy and p_dem > limit - 1.0:
            clk = req * ((limit - 3.0 - base) / max(1.0, p_dem - base)) ** (1.0 / _PWR_EXP)
            reasons |= R_PCAP
        if busy and self.therm_cap < clk:
            clk = self.therm_cap
            reasons |= R_SWTHERM
            if self.tg >= m.t_hw:
                reasons |= R_HWTHERM | R_HWSLOW
        if lat.brake > 0 and busy:
            clk = min(clk, lat.brake)
            reasons |= R_BRAKE | R_HWSLOW
        clk = max(_IDLE_CLK, _CLK_STEP * round(clk / _CLK_STEP))
        power = base + dyn * (clk / _FMAX) ** _PWR_EXP + rng.gauss(0.0, 2.5 if busy else 0.6)
        if reasons & R_PCAP:
            power = min(power, limit - abs(rng.gauss(0.0, 3.0)))
        power = max(power, 20.0)
        # temperatures: the die and the HBM follow power with their lags, from a wandering inlet
        inlet = g.node.inlet0 + 1.6 * math.tanh(g.node.inlet.at(s))
        target = inlet + g.off + g.R * lat.r_mult * power
        self.tg += (target - self.tg) / g.tau_g
        tmt = inlet + g.moff + g.Rm * power + 20.0 * lat.dram + lat.hbm_off
        self.tm += (tmt - self.tm) / g.tau_m
        # the driver's thermal controller acts on the next second's clock
        if self.tg > m.t_sw:
            self.therm_cap = max(600.0, self.therm_cap - (10.0 + 14.0 * (self.tg - m.t_sw)))
        elif self.tg < m.t_sw - 1.5:
            self.therm_cap = min(_FMAX, self.therm_cap + 25.0)
        self.energy += power * 1000.0
        self.sbe += lat.sbe
        self.dbe += lat.dbe
        self.replay += lat.replay
        self.power = power
        self.clk = clk
        self.reasons = reasons
        self.plim = limit
        self.util = lat.util
        self.dram_now = lat.dram
        self.mem = lat.mem
        self.prev_proc = self.proc
        self.proc = lat.proc
        gr = lat.gr if lat.gr >= 0 else min(1.0, max(lat.sm * 1.08, lat.util / 100.0 * rng.uniform(0.96, 1.0)))
        a = self.acc
        a[0] += gr
        a[1] += lat.sm
        a[2] += lat.occ
        a[3] += lat.tensor
        a[4] += lat.dram + 3.8e-6
        a[5] += lat.fp32
        a[6] += lat.fp16
        a[7] += lat.tx + 3.5e5
        a[8] += lat.rx + 1.0e5
        a[9] += lat.nvl
        a[10] += lat.pcpu
        a[11] += lat.busiest
        a[12] += lat.rq
        a[13] += lat.sleeping
        a[14] += lat.ccpu
        a[15] += lat.blocked
        self.n += 1


# ---------------------------------------------------------------------------------------------
# the fleet

_NS_TRAIN = ("llm-train", "research")


class IndependentFleet:
    """A labelled fleet trace: ``incidents`` and ``records()`` (GpuRecord and EventRecord in time order)."""

    def __init__(self, nodes: int = 6, hours: float = 3.0, seed: int = 1, t0: float = 1_767_225_600.0) -> None:
        self.seed = seed
        self.t0 = t0
        self.S = max(120, round(hours * 3600))
        self.key = f"independent:{seed}"
        self.rng = random.Random(self.key)
        self.nodes: list[_Node] = []
        self.works: list[_Work] = []
        self.services: list[_Service] = []
        self.incidents: list[Incident] = []
        self.events: list[tuple[float, int, EventRecord]] = []  # (abs ts, order, event)
        self.extra: list[tuple[float, _Gpu]] = []  # the agent's immediate sample after an XID
        self._n = 0
        self._pending_orphans: list[int] = []
        self._pending_launch: list[tuple[int, float]] = []
        self._pending_pre: list[tuple[str, _Gpu, int, int, dict[str, object]]] = []
        self._build_nodes(max(1, nodes))
        self._plan_training()
        self._plan_serving()
        self._plan_gpu_lost()
        self._plan_dedicated()
        self._plan_mixed()
        self._plan_benign()
        self._plan_incidents()
        self._finish_labels()
        self.incidents.sort(key=lambda i: (i.start, i.node, i.gpu))

    # ---- helpers
    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{self.key}:{prefix}:{self._n}"

    def _suffix(self, n: int = 5) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))

    def _label(self, kind: str, gpu: _Gpu, start: float, end: float, onset: float, **detail: object) -> None:
        assert kind in KINDS
        for x, y in gpu.node.restarts:  # nothing can be known while the node's agent restarts
            if x <= start <= y + 1:
                start = y + 2
        if (int(onset), int(end)) not in gpu.windows:
            gpu.windows.append((int(onset), int(end)))
        self.incidents.append(Incident(kind, gpu.node.name, gpu.uuid, self.t0 + start, self.t0 + end,
                                       self.t0 + onset, dict(detail)))

    def _event(self, s: float, gpu: _Gpu, kind: str, code: int | None = None, detail: str = "") -> None:
        self._n += 1
        self.events.append((self.t0 + s, self._n, EventRecord(self.t0 + s, gpu.node.name, gpu.uuid, kind, code,
                                                              detail)))

    def _all_gpus(self) -> list[_Gpu]:
        return [g for n in self.nodes for g in n.gpus]

    # ---- the fleet's machines
    def _build_nodes(self, n: int) -> None:
        rng = self.rng
        base = ["train2", "train2", "serve", "train", "serve", "mixed"]
        if n == 1:
            roles = ["mixed"]
        elif n == 2:
            roles = ["train", "serve"]
        elif n == 3:
            roles = ["train", "serve", "mixed"]
        elif n < 6:
            roles = [*base[: n - 1], "mixed"]
        else:
            roles = base + [("serve", "train", "mixed", "train")[i % 4] for i in range(n - 6)]
        models = [_H200 if rng.random() < 0.5 else _H100 for _ in range(n)]
        if n >= 2 and len(set(models)) == 1:
            models[rng.randrange(n)] = _H100 if models[0] is _H200 else _H200
        if "train2" in roles:  # the two nodes of one job are of one kind
            i = roles.index("train2")
            models[i + 1] = models[i]
        pool = {_H100: "h100", _H200: "h200"}
        counts: dict[str, int] = {}
        for i in range(n):
            p = pool[models[i]]
            counts[p] = counts.get(p, 0) + 1
            name = f"gpu-{p}-{rng.choice('abcd')}{counts[p]:02d}"
            node = _Node(name, models[i], roles[i], f"{self.key}:node{i}", rng)
            node.gpus = [_Gpu(node, j, rng) for j in range(8)]
            _plan_agent(node, self.S)
            self.nodes.append(node)
        if n >= 4:  # a rack on a power budget: its GPUs run capped at 600-650 W (their usual)
            self.rng.choice(self.nodes).plim = self.rng.choice((600.0, 650.0))
            self.rng.choice(self.nodes).has_psi = False  # a node whose kernel gives no PSI

    # ---- training
    def _train_params(self, rr: random.Random, model: _Model, n: int, multinode: bool) -> _TrainParams:
        total = model.total
        big = n >= 4
        return _TrainParams(
            level=rr.uniform(0.62, 0.9) if big else rr.uniform(0.38, 0.75),
            util=rr.uniform(94, 100) if big else rr.uniform(80, 99),
            tfrac=rr.uniform(0.6, 0.78), dfrac=rr.uniform(0.25, 0.45), ofrac=rr.uniform(0.25, 0.45),
            nvl=rr.uniform(4e10, 1.3e11) if n > 1 else 0.0, rx=rr.uniform(2e7, 2.5e8),
            wmem=total * rr.uniform(0.3, 0.55), amem=total * rr.uniform(0.12, 0.3),
            saw=rr.choice((0.0, 0.0, rr.uniform(500, 2500))), saw_period=rr.uniform(90, 330),
            eval_mem=rr.choice((0.0, rr.uniform(400, 2200))),
            t_ctx=rr.randint(6, 20), t_load=rr.randint(60, 180),
            t_comp=rr.randint(200, 480) if big else rr.randint(90, 200),
            t_ramp=rr.randint(60, 200), load_bw=rr.uniform(1.5e9, 6e9),
            eval_every=rr.uniform(1200, 2700) if big else rr.uniform(600, 1500),
            eval_len=(60, 180) if big else (30, 120), eval_frac=rr.uniform(0.25, 0.5),
            ckpt_every=rr.uniform(1500, 3600) if big else rr.uniform(900, 2400),
            ckpt_len=(30, 120) if big else (10, 45), ckpt_style=rr.choice(("sharded", "rank0")),
            hiccup_every=rr.uniform(300, 900), rank_sd=rr.uniform(0.015, 0.035),
            cpu_pod=rr.uniform(3.0, 7.0) if big else rr.uniform(2.0, 6.0),
            climit=rr.choice((48.0, 64.0, 96.0)) if big else 12.0,
            internode=rr.uniform(8e9, 1.8e10) if multinode else 0.0,
        )

    def _train_job(self, gpus: list[_Gpu], start: int, end: int, multinode: bool = False) -> _Train:
        rr = random.Random(self._id("job"))
        n = len(gpus)
        fam = rr.choice(("llama", "qwen", "mixtral", "gemma", "mistral"))
        kind = "pretrain" if n >= 8 else rr.choice(("sft", "dpo", "distill"))
        size = rr.choice(("8b", "14b", "32b", "70b")) if n >= 4 else rr.choice(("1b", "3b", "8b"))
        name = f"{kind}-{fam}-{size}-{rr.randint(100, 999)}"
        p = self._train_params(rr, gpus[0].node.model, n, multinode)
        stages = rr.choice((1, 1, 2, 4)) if n >= 4 else 1
        moe = fam == "mixtral" or (n >= 8 and rr.random() < 0.25)
        job = _Train(name, rr.choice(_NS_TRAIN), name, gpus, start, end, self._id("train"), p, stages, moe)
        nodes_in = sorted({g.node.name for g in gpus})
        job.pods = [f"{name}-worker-{nodes_in.index(g.node.name)}" for g in gpus]
        self.works.append(job)
        return job

    def _plan_training(self) -> None:
        rng = self.rng
        S = self.S
        pairs = [nd for nd in self.nodes if nd.role == "train2"]
        for i in range(0, len(pairs) - 1, 2):
            a, b = pairs[i], pairs[i + 1]
            start = -rng.randint(3600, 20 * 3600)
            end = int(S * rng.uniform(0.45, 0.8)) if rng.random() < 0.6 else S + 3600
            self._train_job(a.gpus + b.gpus, start, end, multinode=True)
            t = end + rng.randint(180, 900)
            for nd in (a, b):
                self._fill_train_node(nd, t + rng.randint(0, 300))
        for nd in self.nodes:
            if nd.role == "train":
                self._fill_train_node(nd, -rng.randint(1800, 12 * 3600))

    def _fill_train_node(self, nd: _Node, t: int) -> None:
        rng = self.rng
        S = self.S
        while t < S - 600:
            layout = rng.choice(((8,), (4, 4), (8,), (4, 2, 1, 1)))
            i = 0
            ends = []
            for n in layout:
                gpus = nd.gpus[i: i + n]
                i += n
                st = t + rng.randint(0, 240) if t > 0 else t
                dur = rng.randint(2400, 9000) if n >= 4 else rng.randint(1200, 4000)
                if n >= 4:
                    self._train_job(gpus, st, st + dur)
                else:
                    self._finetune(gpus, st, st + dur)
                ends.append(st + dur)
            t = max(ends) + rng.randint(120, 1200)

    def _finetune(self, gpus: list[_Gpu], start: int, end: int) -> _Train:
        rr = random.Random(self._id("ft"))
        p = self._train_params(rr, gpus[0].node.model, len(gpus), False)
        p.t_comp = p.t_load + rr.randint(0, 60)
        p.t_load = p.t_ctx + rr.randint(20, 80)
        p.t_comp = max(p.t_comp, p.t_load)
        p.wmem = gpus[0].node.model.total * rr.uniform(0.12, 0.35)
        p.amem = gpus[0].node.model.total * rr.uniform(0.08, 0.3)
        name = f"lora-{rr.choice(('support', 'sql', 'code', 'legal', 'med'))}-{rr.randint(1000, 9999)}"
        job = _Train(name, rr.choice(("ml-batch", "team-nlp", "team-search")), "lora-ft", gpus, start, end,
                     self._id("ftw"), p)
        job.pname = "python3"
        job.container = "trainer"
        job.pods = [f"{name}-{self._suffix()}"] * len(gpus)
        self.works.append(job)
        return job

    # ---- serving
    def _plan_serving(self) -> None:
        rng = self.rng
        S = self.S
        serve_nodes = [nd for nd in self.nodes if nd.role == "serve"]
        if not serve_nodes:
            return
        scale = len(serve_nodes) / 2.0
        specs = [("chat-70b", "vllm", 2, 1.0 * scale), ("assist-8b", "vllm", 1, 1.35 * scale),
                 ("embed-bge", "tei", 1, 0.8 * scale)]
        hosts = serve_nodes + [nd for nd in self.nodes if nd.role == "mixed"]
        for name, kind, tp, sc in specs:
            svc = _Service(name, kind, tp, S, f"{self.key}:svc:{name}", sc)
            self.services.append(svc)
            lo = 1 if kind == "tei" else 2
            hi = max(lo + 1, round((3 if kind == "tei" else 7) * scale))
            rs = self._suffix(9 if kind == "vllm" else 10)

            def add(t: int, canary: float = 0.0, svc: _Service = svc, rs: str = rs, tp: int = tp) -> _Replica | None:
                for nd in hosts:
                    for i in range(0, 8, tp):
                        gs = nd.gpus[i: i + tp]
                        if all(g.free(max(t, 0), S) for g in gs):
                            hash_ = "canary-" + self._suffix(9) if canary else rs
                            pod = f"{svc.name}-{hash_}-{self._suffix()}"
                            r = _Replica(svc, pod, gs, t, S + 3600, self._id("rep"), canary)
                            svc.replicas.append(r)
                            self.works.append(r)
                            return r
                return None

            desired = int(_clamp(math.ceil(svc.demand_min(0) / svc.target), lo, hi))
            for _ in range(desired):
                add(-rng.randint(1800, 30 * 3600))
            up = down = 0
            for m in range(1, S // 60):
                live = [r for r in svc.replicas if r.canary == 0.0 and r.drain_at is None and r.start < m * 60]
                avg = sum(svc.demand_min(m - j) for j in range(3)) / 3
                want = int(_clamp(math.ceil(avg / svc.target), lo, hi))
                if want > len(live):
                    up += 1
                    down = 0
                    if up >= 2:
                        for _ in range(want - len(live)):
                            add(m * 60 + rng.randint(5, 50))
                        up = 0
                elif want < len(live):
                    down += 1
                    up = 0
                    if down >= 6:
                        victim = min(live, key=lambda r: r.weight(m * 60) * (0.5 if r.start > 0 else 1.0))
                        victim.drain_at = m * 60 + rng.randint(0, 40)
                        victim.drain_len = rng.randint(90, 200)
                        victim.truncate(victim.drain_at + victim.drain_len)
                        down = 0
                else:
                    up = down = 0
            if name == "assist-8b" and S >= 5400:  # a canary, then the rolling update that promotes it
                tc = int(S * rng.uniform(0.15, 0.35))
                c = add(tc, canary=rng.uniform(0.03, 0.06))
                if c is not None:
                    c_end = tc + rng.randint(1500, 2400)
                    c.drain_at = c_end
                    c.drain_len = 60
                    c.truncate(c_end + 60)
                    self._rolling(svc, c_end + rng.randint(120, 300))
            if name == "chat-70b" and S >= 7200 and rng.random() < 0.5:
                self._rolling(svc, int(S * rng.uniform(0.55, 0.75)))

    def _rolling(self, svc: _Service, t: int) -> None:
        """A rolling update, one replica at a time, in place (maxSurge 0): each pod is replaced and warms up."""
        rng = self.rng
        new_rs = self._suffix(9)
        for r in sorted(svc.replicas, key=lambda r: r.start):
            if r.canary or r.start >= t or r.end <= t + 600 or (r.drain_at is not None and r.drain_at < t + 600):
                continue
            back = t + rng.randint(12, 40)
            r.add_break(_Break(t, [t] * len(r.gpus), back))
            r.run_pods.append((back, f"{svc.name}-{new_rs}-{self._suffix()}"))
            t = back + r.t_graph + rng.randint(15, 40)
            if t > self.S:
                break

    # ---- GPUs that fall off the bus (planned before the gaps are filled: nothing runs on them after)
    def _plan_gpu_lost(self) -> None:
        rng = self.rng
        S = self.S
        want = self._count(2.5)
        tries = 0
        while want > 0 and tries < 200:
            tries += 1
            g = rng.choice(self._all_gpus())
            onset = rng.randint(_QUIET + 300, max(_QUIET + 301, S - 900))
            later = [(a, b) for a, b in g.alloc if b > onset]
            if any(a > onset for a, b in later) or not g.inc_free(onset, S):
                continue
            cur = [w for w, _r in g.works if w.start <= onset < w.end]
            if any(isinstance(w, _Replica) for w in cur):
                continue
            if cur and not cur[0].steady(onset, onset + 60, 600):
                continue
            if cur and any(any(a > onset for a, _b in h.alloc) for h in cur[0].gpus):
                continue
            if not self._agent_up(g, onset, onset + 5):
                continue
            xid79 = rng.random() < 0.5
            seen = onset if xid79 else onset + rng.randint(1, 3)
            back = onset + rng.randint(900, 1800) if rng.random() < 0.35 else None
            if back is not None and back > S - 300:
                back = None
            g.lost_at = onset
            g.back_at = back
            if xid79:
                self._event(onset + rng.random() * 0.5, g, "xid", 79)
                self._event(onset + 0.6, g, "gpu_lost", None, "XID 79: GPU has fallen off the bus")
            else:
                self._event(seen + rng.random() * 0.5, g, "gpu_lost", None, "GPU is lost")
            end = back if back is not None else S
            if back is not None:
                self._event(back + 0.3, g, "gpu_recovered")
            for w in cur:  # every rank of the job dies with it (NCCL errors), none restarts
                exits = [onset if h is g else onset + rng.randint(3, 40) for h in w.gpus]
                w.add_break(_Break(onset, exits, None))
            self._label("gpu_lost", g, seen, end, onset, shape="xid79" if xid79 else "nvml_lost",
                        busy=bool(cur), recovered=back is not None)
            want -= 1

    def _count(self, per18: float) -> int:
        """How many of an incident: ``per18`` per 18 node-hours (six nodes for three hours), randomly rounded."""
        x = per18 * len(self.nodes) * (self.S / 3600) / 18.0 * self.rng.uniform(0.8, 1.25)
        n = int(x)
        return n + (1 if self.rng.random() < x - n else 0)

    @staticmethod
    def _agent_up(g: _Gpu, a: float, b: float) -> bool:
        """Whether the node's agent runs over [a, b] (an XID while it restarts is never reported)."""
        return all(b < x - 5 or a > y + 5 for x, y in g.node.restarts)

    def _free_window(self, dur: int, nodes: list[_Node], lo: int | None = None) -> tuple[_Gpu, int] | None:
        rng = self.rng
        lo = _QUIET + 60 if lo is None else lo
        if self.S - dur - 300 <= lo:
            return None
        for _ in range(300):
            nd = rng.choice(nodes)
            g = rng.choice(nd.gpus)
            a = rng.randint(lo, self.S - dur - 300)
            if g.free(a, a + dur) and g.inc_free(a, a + dur, 600):
                return g, a
        return None

    # ---- workloads made for incidents: an abandoned notebook, a lingering job, launch-bound jobs
    def _plan_dedicated(self) -> None:
        rng = self.rng
        hosts = [nd for nd in self.nodes if nd.role in ("mixed", "serve")] or self.nodes
        anywhere = self.nodes
        n_idle = self._count(2.5)
        shapes = ["notebook_abandoned", "finished_not_exited", "orphaned_replica"]
        rng.shuffle(shapes)
        for i in range(n_idle):
            shape = shapes[i % 3]
            idle = rng.randint(1200, 3300)
            if shape == "orphaned_replica":
                self._pending_orphans.append(idle)
                continue
            busy = rng.randint(600, 1800)
            got = self._free_window(busy + idle + 60, hosts) or self._free_window(busy + idle + 60, anywhere)
            if got is None:
                continue
            g, a = got
            onset = a + busy
            if onset - 0 < _QUIET:
                continue
            end = onset + idle
            if shape == "notebook_abandoned":
                user = rng.choice(("akim", "jlopez", "mchen", "priya", "tom", "svetlana"))
                w: _Work = _Notebook(f"jupyter-{user}-0", "notebooks", "jupyter", [g], a, end,
                                     self._id("nb"), idle_from=onset)
            else:
                ft = self._finetune([g], a, end)
                ft.linger_from = onset
                w = ft
            if w not in self.works:
                self.works.append(w)
            self._label("idle_allocated", g, onset + 600, end, onset, shape=shape, idle_s=idle)
        n_launch = self._count(3.0)
        for i in range(n_launch):
            shape = ("tiny_batch_job", "notebook_eager_generate", "python_eval_loop")[i % 3]
            dur = rng.randint(420, 1500)
            util = rng.uniform(30, 88)
            if shape == "python_eval_loop":
                self._pending_launch.append((dur, util))
                continue
            lead = 40 if shape == "tiny_batch_job" else rng.randint(300, 900)
            got = self._free_window(lead + dur + 120, hosts) or self._free_window(lead + dur + 120, anywhere)
            if got is None:
                continue
            g, a = got
            onset = a + lead
            if shape == "tiny_batch_job":
                ft = self._finetune([g], a, onset + dur + rng.randint(0, 60))
                ft.p.t_ctx, ft.p.t_load, ft.p.t_comp = 8, 40, 40
                ft.launch = (onset, onset + dur, util)
            else:
                nb = _Notebook(f"jupyter-{rng.choice(('dana', 'ravi', 'olu', 'kim'))}-0", "notebooks", "jupyter",
                               [g], a, onset + dur + rng.randint(60, 300), self._id("nb"), max_gap=240)
                nb.cells = [c for c in nb.cells if c[1] < onset - 30]
                nb.starts = [c[0] for c in nb.cells]
                nb.launch = (onset, onset + dur, util)
                self.works.append(nb)
            self._label("launch_bound", g, onset + 90, onset + dur, onset, shape=shape, util=round(util))

    # ---- the rest: fine-tunes, ETL, batch inference, notebooks, and spare GPUs
    def _plan_mixed(self) -> None:
        rng = self.rng
        S = self.S
        for nd in self.nodes:
            spare = rng.sample(range(8), rng.choice((0, 1, 1, 2))) if nd.role != "mixed" else rng.sample(range(8), 2)
            for g in nd.gpus:
                if g.index in spare or g.lost_at is not None:
                    continue
                t = -rng.randint(0, 3600) if rng.random() < 0.5 else rng.randint(0, 1200)
                while t < S - 300:
                    dur = rng.randint(900, 4200)
                    if not g.free(max(t, 0), min(S, t + dur)):
                        t += rng.randint(120, 600)
                        continue
                    r = rng.random()
                    if nd.role == "train" and r < 0.8:  # training nodes' gaps stay empty
                        t += dur
                        continue
                    if r < 0.35:
                        self._finetune([g], t, t + dur)
                    elif r < 0.6:
                        nm = f"embed-backfill-{self._suffix(5)}"
                        self.works.append(_Etl(nm, "data", "embed-backfill", [g], t, t + dur, self._id("etl")))
                    elif r < 0.78:
                        nm = f"batch-eval-{rng.randint(100, 999)}-{self._suffix()}"
                        self.works.append(_BatchInfer(nm, "ml-batch", "batch-eval", [g], t, t + min(dur, 2400),
                                                      self._id("bi")))
                        dur = min(dur, 2400)
                    else:
                        user = rng.choice(("ana", "bo", "chen", "dev", "eli", "femi", "gus"))
                        d = min(dur, 3000)
                        self.works.append(_Notebook(f"jupyter-{user}-0", "notebooks", "jupyter", [g], t, t + d,
                                                    self._id("nb")))
                        dur = d
                    t += dur + rng.randint(180, 1800)

    def _plan_benign(self) -> None:
        """A healthy fleet's odd corrected error and PCIe replay: isolated, not incidents."""
        rng = self.rng
        gpus = self._all_gpus()
        for _ in range(self._count(4.0)):
            g = rng.choice(gpus)
            g.benign[rng.randint(0, self.S - 1)] = (1, 0)
        for _ in range(self._count(4.0)):
            g = rng.choice(gpus)
            g.benign[rng.randint(0, self.S - 1)] = (0, rng.randint(1, 3))
        trickle = rng.choice(gpus)  # a marginal link within spec: a replay every ten minutes or so
        t = rng.randint(0, 900)
        while t < self.S:
            trickle.benign[t] = (0, 1)
            t += rng.randint(300, 1500)

    # ---- incidents
    def _busy(self, kinds: tuple[type[_Work], ...], dur: int, warm: int = 900,
              pred: Callable[[_Work], bool] | None = None) -> tuple[_Work, int] | None:
        rng = self.rng
        ws = [w for w in self.works if isinstance(w, kinds) and (pred is None or pred(w))]
        if not ws or self.S - dur - 240 <= _QUIET + 120:
            return None
        for _ in range(120):
            w = rng.choice(ws)
            a = rng.randint(_QUIET + 120, self.S - dur - 240)
            if w.steady(a, a + dur, warm) and all(g.inc_free(a, a + dur) for g in w.gpus):
                return w, a
        return None

    def _plan_incidents(self) -> None:
        rng = self.rng
        trains = (_Train,)

        # XID: an application fault or an ECC/NVLink error; most kill the process, which k8s restarts
        for _ in range(self._count(6.0)):
            code = rng.choice((13, 31, 43, 43, 13, 45, 63, 64, 74, 94, 95))
            kill = code not in (63, 64)
            if rng.random() < 0.2 or not kill:  # on a GPU with nothing of note running
                got = self._free_window(120, self.nodes)
                if got is None:
                    continue
                g, a = got
                self._xid(g, a, code, None)
                continue
            pick = self._busy((_Train, _Replica, _Etl, _BatchInfer), 1200, 600)
            if pick is None:
                continue
            w, a = pick
            rank = rng.randrange(len(w.gpus))
            self._xid(w.gpus[rank], a, code, (w, rank))

        # ECC double-bit: the counter steps; the process using the page may be killed
        for _ in range(self._count(3.0)):
            if rng.random() < 0.5:
                pick = self._busy((_Train, _Replica, _Etl, _BatchInfer, _Notebook), 1200, 600)
                if pick is None:
                    continue
                w, a = pick
                rank = rng.randrange(len(w.gpus))
                g = w.gpus[rank]
                if not self._agent_up(g, a, a + 5):
                    continue
                n = rng.choice((1, 1, 1, 2))
                g.faults.append(_Counts(a, a + 3, "dbe", {a: 1, a + 2: n - 1} if n > 1 else {a: 1}))
                if rng.random() < 0.6:
                    back = a + rng.randint(60, 200)
                    exits = [a + rng.randint(1, 4) if h is g else a + rng.randint(5, 40) for h in w.gpus]
                    w.add_break(_Break(a, exits, back))
                    w.windows.append((a, back + 900))
                self._label("ecc_dbe", g, a, a + 3, a, shape="dbe_in_use", count=n)
            else:
                got = self._free_window(300, self.nodes)
                if got is None or not self._agent_up(got[0], got[1], got[1] + 5):
                    continue
                g, a = got
                g.faults.append(_Counts(a, a + 1, "dbe", {a: 1}))
                self._label("ecc_dbe", g, a, a + 1, a, shape="dbe_scrub", count=1)

        self._plan_orphans()

        # throughput drops
        for _ in range(self._count(1.5)):  # a synchronous pod's input pipeline stalls
            dur = rng.randint(240, 900)
            pick = self._busy(trains, dur, 900, lambda w: len(w.gpus) >= 4 and (len(w.gpus) < 16 or rng.random() < 0.3))
            if pick is None:
                continue
            w, a = pick
            depth = rng.uniform(0.5, 0.9)
            for g in w.gpus:
                g.faults.append(_WorkDrop(a, a + dur, depth, 0.0, "io", seed=self._id("stall")))
                self._label("throughput_drop", g, a, a + dur, a, shape="input_stall", depth=round(depth, 2))
            w.windows.append((a, a + dur))
        for _ in range(self._count(1.0)):  # a job degrading over minutes
            ramp = rng.randint(480, 1500)
            depth = rng.uniform(0.55, 0.8)
            hold = rng.randint(180, 600)
            dur = ramp + hold
            pick = self._busy(trains, dur, 900, lambda w: len(w.gpus) <= 8)
            if pick is None:
                continue
            w, a = pick
            start = a + int(ramp * 0.4 / depth)
            for g in w.gpus:
                g.faults.append(_WorkDrop(a, a + dur, depth, ramp, "slow", seed=self._id("drift")))
                self._label("throughput_drop", g, start, a + dur, a, shape="slow_drift", depth=round(depth, 2))
            w.windows.append((a, a + dur))
        for _ in range(self._count(2.0)):  # a serving replica starved of host CPU, its demand unchanged
            dur = rng.randint(300, 1200)
            pick = None
            for _try in range(12):
                pick = self._busy((_Replica,), dur, 900, lambda w: isinstance(w, _Replica) and w.canary == 0.0
                                  and w.svc.kind == "vllm")
                if pick is not None and self._steady_demand(pick[0], pick[1] - 300, pick[1] + dur):
                    break
                pick = None
            if pick is None:
                continue
            w, a = pick
            depth = rng.uniform(0.5, 0.75)
            for g in w.gpus:
                g.faults.append(_WorkDrop(a, a + dur, depth, 0.0, "cpu", seed=self._id("starve")))
                self._label("throughput_drop", g, a, a + dur, a, shape="replica_host_starved", depth=round(depth, 2))
            w.windows.append((a, a + dur))
        for _ in range(self._count(1.0)):  # a one-GPU job whose loader workers died
            dur = rng.randint(300, 1200)
            pick = self._busy(trains, dur, 900, lambda w: isinstance(w, _Train) and len(w.gpus) == 1
                              and w.linger_from is None and w.launch is None)
            if pick is None:
                continue
            w, a = pick
            depth = rng.uniform(0.55, 0.85)
            g = w.gpus[0]
            g.faults.append(_WorkDrop(a, a + dur, depth, 0.0, "io", seed=self._id("loader")))
            self._label("throughput_drop", g, a, a + dur, a, shape="loader_workers_died", depth=round(depth, 2))
            w.windows.append((a, a + dur))

        # stragglers: one rank of a synchronous pod is slow; the others wait at the collectives
        for _ in range(self._count(3.5)):
            dur = rng.randint(600, 1800)
            pick = self._busy(trains, dur, 900, lambda w: len(w.gpus) >= 4)
            if pick is None:
                continue
            w, a = pick
            rank = rng.randrange(len(w.gpus))
            g = w.gpus[rank]
            shape = rng.choice(("low_clock", "slow_rank"))
            wait = rng.uniform(0.82, 0.92)
            if shape == "low_clock":
                clk = rng.choice((1110.0, 1200.0, 1305.0, 1410.0))
                g.faults.append(_AppClock(a, a + dur, clk))
                detail: dict[str, object] = {"clock": clk}
            else:
                slow = rng.uniform(0.4, 0.65)
                g.faults.append(_WorkDrop(a, a + dur, 1.0 - slow, 0.0, "", seed=self._id("slow")))
                detail = {"sm_ratio": round(slow / wait, 2)}
            for h in w.gpus:
                if h is not g:
                    h.faults.append(_WorkDrop(a, a + dur, 1.0 - wait, 0.0, "", spin=True, seed=self._id("wait")))
            w.windows.append((a, a + dur))
            self._label("straggler", g, a, a + dur, a, shape=shape, **detail)

        # memory leaks
        for _ in range(self._count(4.5)):
            dur = rng.randint(900, 2700)
            pick = self._busy((_Train, _Replica, _BatchInfer), dur, 1200,
                              lambda w: not (isinstance(w, _Train) and (w.linger_from is not None or w.launch)))
            if pick is None:
                continue
            w, a = pick
            rank = 0
            g = w.gpus[rank]
            total = g.node.model.total
            head = total * 0.97 - self._peak_mem(w, rank)
            if head < 2500:
                continue
            grow = min(head - 300, rng.uniform(2500, 12000))
            rate = grow / dur
            steps = rng.choice((0.0, 0.0, rng.choice((256.0, 512.0, 1024.0))))
            oom = rng.random() < 0.35
            run = w.run_at(rank, a)
            assert run is not None
            g.faults.append(_Leak(a, a + dur, a + dur if oom else run[1], rate, steps))
            if oom:  # the allocation that does not fit: the process dies, the pod restarts
                back = a + dur + rng.randint(40, 150)
                exits = [a + dur if h is g else a + dur + rng.randint(2, 30) for h in w.gpus]
                w.add_break(_Break(a + dur, exits, back))
                w.windows.append((a + dur, back + 900))
            first = a + int(min(600, max(180, 1024.0 / rate)))
            self._label("memory_leak", g, first, a + dur, a,
                        shape=("staircase" if steps else "linear") + ("_oom" if oom else ""),
                        mib_per_min=round(rate * 60, 1), rank=rank)
        self._plan_launch_overlays()

        # thermal: a cooling fault on a busy GPU; its clock is pulled down once the die reaches slowdown
        for _ in range(self._count(3.5)):
            dur = rng.randint(480, 1500)
            pick = self._busy((_Train, _Etl, _BatchInfer), dur, 900,
                              lambda w: not isinstance(w, _Train) or (w.p.level > 0.55 and w.launch is None
                                                                      and w.linger_from is None))
            if pick is None:
                continue
            w, a = pick
            g = w.gpus[rng.randrange(len(w.gpus))]
            p_ref = 480.0
            inlet = g.node.inlet0
            need = (g.node.model.t_sw + rng.uniform(7.0, 14.0) - inlet - g.off) / (g.R * p_ref)
            mult = max(1.5, need)
            rise = rng.uniform(60, 420)
            g.faults.append(_Cooling(a, a + dur, mult, rise))
            g.windows.append((a, a + dur))  # labelled once the pre-run finds the slowdown
            self._pending_pre.append(("thermal_throttle", g, a, a + dur,
                                      {"shape": rng.choice(("fan_failure", "coolant_flow")) if rise < 200
                                       else "heatsink_degraded", "r_mult": round(mult, 2)}))

        # power: a limit set far below the usual on a busy GPU; a node's power brake
        brake_done = False
        for _ in range(self._count(3.5)):
            if not brake_done and rng.random() < 0.35 and self._brake():
                brake_done = True
                continue
            dur = rng.randint(300, 1500)
            pick = self._busy((_Train, _Etl, _BatchInfer), dur, 900,
                              lambda w: not isinstance(w, _Train) or (w.p.level > 0.5 and w.launch is None
                                                                      and w.linger_from is None))
            if pick is None:
                continue
            w, a = pick
            g = w.gpus[rng.randrange(len(w.gpus))]
            limit = rng.choice((200.0, 250.0, 300.0, 350.0))
            g.faults.append(_PowerLimit(a, a + dur, limit))
            g.windows.append((a, a + dur))
            self._pending_pre.append(("power_throttle", g, a, a + dur, {"shape": "power_limit_lowered",
                                                                        "limit_w": limit}))

        # ECC single-bit bursts, PCIe replay storms, HBM running hot: any GPU, busy or not
        for _ in range(self._count(3.5)):
            dur = rng.randint(120, 600)
            got = self._free_any(dur)
            if got is None or not self._agent_up(got[0], got[1], got[1] + 30):
                continue
            g, a = got
            total = rng.randint(25, 700)
            g.faults.append(_Counts(a, a + dur, "sbe", self._burst(a, dur, total)))
            self._label("ecc_sbe_rising", g, a, a + dur, a, shape="sbe_burst", count=total)
        for _ in range(self._count(3.5)):
            dur = rng.randint(180, 900)
            got = self._free_any(dur)
            if got is None or not self._agent_up(got[0], got[1], got[1] + 30):
                continue
            g, a = got
            per_min = rng.uniform(15, 400)
            total = int(per_min * dur / 60)
            g.faults.append(_Counts(a, a + dur, "replay", self._burst(a, dur, total, flat=True)))
            self._label("pcie_replay_storm", g, a, a + dur, a, shape="replay_storm", per_min=round(per_min))
        for _ in range(self._count(3.5)):
            dur = rng.randint(900, 2400)
            got = self._free_any(dur, stable=True)
            if got is None:
                continue
            g, a = got
            off = rng.uniform(10.0, 20.0)
            climb = rng.uniform(60, 240) if rng.random() < 0.5 else rng.uniform(400, 900)
            g.faults.append(_HbmHot(a, a + dur, off, climb, rng.uniform(60, 240)))
            self._label("metric_anomaly", g, a, a + dur, a, shape="hbm_hot_step" if climb < 300 else "hbm_hot_ramp",
                        metric=k.MEMORY_TEMP, offset_c=round(off, 1))

    @staticmethod
    def _steady_demand(w: _Work, a: int, b: int) -> bool:
        """A serving replica's own load over [a, b]: meaningful, and within +-30% of its mean."""
        if not isinstance(w, _Replica):
            return False
        xs = [w.svc.load(s, w) for s in range(a, b, 20)]
        mean = sum(xs) / len(xs)
        return mean > 0.2 and min(xs) > 0.7 * mean and max(xs) < 1.3 * mean

    def _free_any(self, dur: int, stable: bool = False) -> tuple[_Gpu, int] | None:
        """A GPU and a window free of incidents; ``stable``: no process starts or stops in it either."""
        rng = self.rng
        if self.S - dur - 200 <= _QUIET + 60:
            return None
        for _ in range(300):
            g = rng.choice(self._all_gpus())
            a = rng.randint(_QUIET + 60, self.S - dur - 200)
            if not g.inc_free(a, a + dur) or (g.lost_at is not None and a + dur + 60 >= g.lost_at):
                continue
            if stable and any(a - 300 < x < a + dur + 60 for w, r in g.works for run in w.runs(r) for x in run[:2]):
                continue
            return g, a
        return None

    def _burst(self, a: int, dur: int, total: int, flat: bool = False) -> dict[int, int]:
        """``total`` counts over [a, a + dur): a rate that rises and falls (or stays), Poisson seconds."""
        rng = self.rng
        w = [1.0 if flat else math.sin(math.pi * (i + 0.5) / dur) ** 1.5 * rng.uniform(0.3, 1.7) for i in range(dur)]
        sw = sum(w)
        out: dict[int, int] = {}
        for i, x in enumerate(w):
            lam = total * x / sw
            n = 0
            L = math.exp(-lam)
            p = rng.random()
            while p > L and n < 60:
                n += 1
                p *= rng.random()
            if n:
                out[a + i] = n
        if not out:
            out[a + dur // 2] = max(1, total)
        return out

    def _peak_mem(self, w: _Work, rank: int) -> float:
        if isinstance(w, _Train):
            p = w.p
            return 560.0 + p.wmem + p.amem + p.saw + p.eval_mem
        if isinstance(w, _Replica):
            return w.prealloc if w.prealloc > 0 else 500.0 + w.weights * 1.1 + 2000.0
        if isinstance(w, _BatchInfer):
            return w.prealloc
        return w.gpus[0].node.model.total

    def _xid(self, g: _Gpu, a: int, code: int, victim: tuple[_Work, int] | None) -> None:
        rng = self.rng
        a = next((y + 30 for x, y in g.node.restarts if x - 10 <= a <= y + 10), a)  # the agent is up
        ts = a + rng.random()
        codes = [code]
        if code in (13, 43) and rng.random() < 0.4:
            codes.append(45)  # the driver's preemptive cleanup follows
        end = a
        for i, c in enumerate(codes):
            t = ts + i * rng.uniform(0.5, 4.0)
            self._event(t, g, "xid", c)
            self.extra.append((self.t0 + t + 0.004, g))
            end = math.ceil(t)
        if victim is not None:
            w, _rank = victim
            back = a + rng.randint(45, 180)
            exits = [a + rng.randint(1, 6) if h is g else a + rng.randint(4, 45) for h in w.gpus]
            w.add_break(_Break(a, exits, back))
            w.windows.append((a, back + 900))
        self._label("xid", g, a, end, a, shape="app_fault" if code in (13, 31, 43, 45) else "hw_error",
                    code=code, killed=victim is not None)

    def _brake(self) -> bool:
        """A node's power brake (a PSU fault): every GPU's clock held down; only where all eight are busy."""
        rng = self.rng
        for _ in range(40):
            nd = rng.choice(self.nodes)
            dur = rng.randint(120, 480)
            if self.S - dur - 300 <= _QUIET + 120:
                return False
            a = rng.randint(_QUIET + 120, self.S - dur - 300)
            ok = True
            for g in nd.gpus:
                ws = [w for w, _r in g.works if w.start <= a < w.end]
                if not ws or not ws[0].steady(a, a + dur, 900) or not g.inc_free(a, a + dur):
                    ok = False
                    break
                if isinstance(ws[0], (_Notebook, _Replica)) or (isinstance(ws[0], _Train) and
                                                                 (ws[0].launch or ws[0].linger_from is not None)):
                    ok = False
                    break
            if not ok:
                continue
            clk = rng.choice((690.0, 810.0, 900.0))
            for g in nd.gpus:
                g.faults.append(_Brake(a, a + dur, clk))
                g.windows.append((a, a + dur))
                self._pending_pre.append(("power_throttle", g, a, a + dur, {"shape": "power_brake", "clock": clk}))
            return True
        return False

    def _plan_orphans(self) -> None:
        """A serving replica dropped from its Service's endpoints: it holds its GPU and gets no request."""
        for idle in self._pending_orphans:
            pick = self._busy((_Replica,), idle + 120, 900, lambda w: isinstance(w, _Replica) and w.canary == 0.0)
            if pick is None:
                continue
            w, a = pick
            assert isinstance(w, _Replica)
            end = a + idle
            w.orphan_from = a
            w.truncate(end)
            w.windows.append((a, end))
            for g in w.gpus:
                self._label("idle_allocated", g, a + 600, end, a, shape="orphaned_replica", idle_s=idle)

    def _plan_launch_overlays(self) -> None:
        """A fine-tune that runs a generation eval token by token in a Python loop."""
        for dur, util in self._pending_launch:
            pick = self._busy((_Train,), dur, 900, lambda w: len(w.gpus) == 1 and isinstance(w, _Train)
                              and w.launch is None and w.linger_from is None)
            if pick is None:
                continue
            w, a = pick
            g = w.gpus[0]
            g.faults.append(_LaunchOverlay(a, a + dur, util))
            w.windows.append((a, a + dur))
            self._label("launch_bound", g, a + 90, a + dur, a, shape="python_eval_loop", util=round(util))

    def _finish_labels(self) -> None:
        """Thermal and power labels start when the slowdown does: run those GPUs alone to find it."""
        by_gpu: dict[str, list[tuple[str, _Gpu, int, int, dict[str, object]]]] = {}
        for item in self._pending_pre:
            by_gpu.setdefault(item[1].uuid, []).append(item)
        for items in by_gpu.values():
            self._pre_run(items)

    def _pre_run(self, items: list[tuple[str, _Gpu, int, int, dict[str, object]]]) -> None:
        while True:
            g = items[0][1]
            sim = _Sim(g, self.t0)
            sim.warm()
            horizon = max(it[3] for it in items)
            first: dict[tuple[str, int], int] = {}
            held: dict[tuple[str, int], int] = {}
            for s in range(horizon):
                sim.step(s)
                for kind, _g, a, b, _d in items:
                    if a <= s < b:
                        bits = sim.reasons
                        mask = (R_SWTHERM | R_HWTHERM) if kind == "thermal_throttle" else (R_PCAP | R_BRAKE)
                        hit = bits & mask
                        if hit:
                            first.setdefault((kind, a), s)
                            held[(kind, a)] = held.get((kind, a), 0) + 1
            dropped = [it for it in items if first.get((it[0], it[2])) is None or held[(it[0], it[2])] < 120]
            if not dropped:
                for kind, _g, a, b, d in items:
                    self._label(kind, g, first[(kind, a)], b, a, **d)
                return
            for _kind, _g, a, b, _d in dropped:  # it hardly slowed the clock: no incident, no fault
                g.faults = [f for f in g.faults if not (f.onset == a and isinstance(f, (_Cooling, _PowerLimit,
                                                                                          _Brake)))]
                g.windows.remove((a, b))
            items = [it for it in items if it not in dropped]
            if not items:
                return

    # ---- the trace
    def records(self) -> Iterator[GpuRecord | EventRecord]:
        sims = {g.uuid: _Sim(g, self.t0) for g in self._all_gpus()}
        for sim in sims.values():
            sim.warm()
        agents = [_Agent(nd, self.t0, self.S, sims) for nd in self.nodes]
        by_node = {ag.nd.name: ag for ag in agents}
        events = sorted(self.events)
        extra = sorted(self.extra, key=lambda x: x[0])
        ei = xi = 0
        heap: list[tuple[float, int, GpuRecord | EventRecord]] = []
        order = 0
        t0 = self.t0
        for s in range(self.S):
            for nd in self.nodes:
                busy = 0.02 * nd.cores
                psi_cpu = psi_io = node_add = 0.0
                for g in nd.gpus:
                    sim = sims[g.uuid]
                    sim.step(s)
                    if sim.alive:
                        lat = sim.lat
                        busy += lat.ccpu_share
                        node_add = max(node_add, lat.node_cpu)
                        psi_cpu = max(psi_cpu, lat.psi_cpu)
                        psi_io = max(psi_io, lat.psi_io)
                frac = _clamp(busy / nd.cores + node_add, 0.0, 1.0)
                nd.cpu_busy = frac
                nd.psi_cpu = max(psi_cpu, 0.5 * max(0.0, frac - 0.75) + 0.002 * frac)
                nd.psi_io = psi_io
            end = t0 + s + 1
            while ei < len(events) and events[ei][0] < end:
                ts, _o, ev = events[ei]
                ei += 1
                order += 1
                heapq.heappush(heap, (ts, order, ev))
                if ev.kind == "xid":
                    by_node[ev.node].pending.append((ts, ev.gpu, ev.code or 0))
            while xi < len(extra) and extra[xi][0] < end:
                ts, g = extra[xi]
                xi += 1
                ag = by_node[g.node.name]
                rec = ag.sample(sims[g.uuid], ts)
                if rec is not None:
                    order += 1
                    heapq.heappush(heap, (ts, order, rec))
            for ag in agents:
                for ts, rec in ag.tick(end):
                    order += 1
                    heapq.heappush(heap, (ts, order, rec))
            while heap and heap[0][0] < end:
                yield heapq.heappop(heap)[2]
        while heap:
            yield heapq.heappop(heap)[2]


# ---------------------------------------------------------------------------------------------
# the agent on a node


class _Agent:
    """One node's sampler: ~1 s ticks with jitter, slow stretches, restarts; builds the records."""

    def __init__(self, nd: _Node, t0: float, seconds: int, sims: dict[str, _Sim]) -> None:
        self.nd = nd
        self.t0 = t0
        self.rng = random.Random(nd.seed + ":agent")
        rr = random.Random(nd.seed + ":agent-offsets")
        self.sims = [sims[g.uuid] for g in nd.gpus]
        self.next = t0 + rr.random()
        self.slow = [(t0 + a, t0 + b, iv) for a, b, iv in nd.slow]
        self.restarts = [(t0 + a + 0.37, t0 + b + 0.37) for a, b in nd.restarts]
        self.fresh = {s.g.uuid: True for s in self.sims}  # no GPM/rate figures until a second sample
        self.xid: dict[str, int] = {}
        self.pending: list[tuple[float, str, int]] = []  # XIDs from the event thread, applied at their time
        self.ticks = 0
        self.last: dict[str, float] = {}
        self.offs = [0.0018 + 0.0031 * i + rr.uniform(0.0, 0.0008) for i in range(len(self.sims))]

    def _interval(self, t: float) -> float:
        for a, b, iv in self.slow:
            if a <= t < b:
                return iv
        return 1.0

    def tick(self, end: float) -> list[tuple[float, GpuRecord]]:
        out: list[tuple[float, GpuRecord]] = []
        rng = self.rng
        while self.next < end:
            t = self.next
            down = next(((a, b) for a, b in self.restarts if a <= t < b), None)
            if down is not None:  # the agent restarts: silence, then a fresh process
                self.next = down[1] + rng.uniform(0.0, 1.0)
                self.fresh = dict.fromkeys(self.fresh, True)
                self.xid = {}
                self.ticks = 0
                continue
            self.ticks += 1
            for i, sim in enumerate(self.sims):
                ts = t + self.offs[i] + rng.uniform(0.0, 0.0006)
                rec = self.sample(sim, ts)
                if rec is not None:
                    out.append((ts, rec))
            jitter = rng.gauss(0.0, 0.012)
            if rng.random() < 0.01:
                jitter += rng.uniform(0.05, 0.4)
            self.next = t + self._interval(t) + jitter
        return out

    def sample(self, sim: _Sim, ts: float) -> GpuRecord | None:
        if not sim.alive:
            return None
        rng = self.rng
        g = sim.g
        m = sim.model
        nd = self.nd
        if self.pending:
            keep = []
            for t, uuid, code in self.pending:
                if t <= ts:
                    self.xid[uuid] = code
                else:
                    keep.append((t, uuid, code))
            self.pending = keep
        n = max(1, sim.n)
        a = sim.acc
        fresh = self.fresh[g.uuid]
        proc = sim.proc
        mem = round(sim.mem) if proc is not None else 0
        used = mem + 9 if proc is not None else 0
        util = round(_clamp(sim.util + (rng.gauss(0.0, 1.0) if sim.util > 0 else 0.0), 0.0, 100.0))
        dram = sim.dram_now
        mcu = round(_clamp(dram * 130.0 + (rng.gauss(0.0, 1.0) if dram > 0.01 else 0.0), 0.0, 100.0))
        metrics: dict[str, float] = {
            k.GPU_UTIL: util,
            k.MEM_COPY_UTIL: mcu,
            k.ENC_UTIL: 0,
            k.DEC_UTIL: 0,
            k.FB_USED: used,
            k.FB_FREE: m.total - m.reserved - used,
            k.FB_RESERVED: m.reserved,
            k.POWER_USAGE: round(sim.power, 3),
            k.GPU_TEMP: round(sim.tg),
            k.MEMORY_TEMP: round(sim.tm),
            k.SM_CLOCK: int(sim.clk),
            k.MEM_CLOCK: m.mem_clock,
            k.CLOCKS_EVENT_REASONS: sim.reasons,
            k.PCIE_REPLAY_COUNTER: sim.replay,
            k.ECC_SBE_VOL_TOTAL: sim.sbe,
            k.ECC_DBE_VOL_TOTAL: sim.dbe,
            k.PSTATE: 0,
            k.POWER_MGMT_LIMIT: sim.plim,
        }
        if not fresh:
            metrics[k.GR_ENGINE_ACTIVE] = a[0] / n
            metrics[k.SM_ACTIVE] = a[1] / n
            metrics[k.SM_OCCUPANCY] = a[2] / n
            metrics[k.PIPE_TENSOR_ACTIVE] = a[3] / n
            metrics[k.DRAM_ACTIVE] = a[4] / n
            metrics[k.PIPE_FP64_ACTIVE] = 0.0
            metrics[k.PIPE_FP32_ACTIVE] = a[5] / n
            metrics[k.PIPE_FP16_ACTIVE] = a[6] / n
            metrics[k.PCIE_TX_BYTES] = a[7] / n * rng.uniform(0.97, 1.03)
            metrics[k.PCIE_RX_BYTES] = a[8] / n * rng.uniform(0.97, 1.03)
            metrics[k.NVLINK_TX_BYTES] = a[9] / n
            metrics[k.NVLINK_RX_BYTES] = a[9] / n * rng.uniform(0.98, 1.02)
        metrics[k.XID_ERRORS] = self.xid.get(g.uuid, 0)
        if self.ticks % 5 == 1:
            metrics[k.TOTAL_ENERGY_CONSUMPTION] = int(sim.energy)
        if not fresh:
            metrics[k.NODE_CPU_BUSY_RATIO] = _clamp(nd.cpu_busy + rng.gauss(0.0, 0.004), 0.0, 1.0)
            if nd.has_psi:
                metrics[k.NODE_PRESSURE_CPU_WAITING_RATIO] = max(0.0, nd.psi_cpu + rng.gauss(0.0, 0.0008))
                metrics[k.NODE_PRESSURE_MEMORY_WAITING_RATIO] = 0.0
                metrics[k.NODE_PRESSURE_IO_WAITING_RATIO] = max(0.0, nd.psi_io + rng.gauss(0.0, 0.002)) \
                    if nd.psi_io > 0 else 0.0
            if proc is not None and sim.prev_proc == proc:
                metrics[k.PROCESS_CPU_CORES] = a[10] / n
                metrics[k.PROCESS_BUSIEST_THREAD_RATIO] = _clamp(a[11] / n, 0.0, 1.0)
                metrics[k.PROCESS_RUNQUEUE_WAIT_CORES] = a[12] / n
                metrics[k.PROCESS_BLOCKED_THREADS] = round(sim.lat.blocked)
                metrics[k.PROCESS_SLEEPING_RATIO] = _clamp(a[13] / n, 0.0, 1.0)
                metrics[k.CONTAINER_CPU_USAGE_CORES] = a[14] / n
                if sim.lat.climit > 0:
                    metrics[k.CONTAINER_CPU_LIMIT_CORES] = sim.lat.climit
                    metrics[k.CONTAINER_CPU_THROTTLED_RATIO] = _clamp(
                        (a[14] / n / sim.lat.climit - 0.85) * 2.0, 0.0, 1.0)
        procs: list[ProcessRecord] = []
        if proc is not None:
            procs.append(ProcessRecord(pid=proc.pid, name=proc.name, used_memory_mib=float(mem),
                                       sm_util=float(max(0, util - rng.randint(0, 3))), mem_util=float(mcu),
                                       namespace=proc.namespace, pod=proc.pod, container=proc.container,
                                       service=proc.service))
        self.fresh[g.uuid] = False
        sim.acc = [0.0] * 16
        sim.n = 0
        return GpuRecord(ts=ts, node=nd.name, gpu=g.uuid, metrics=metrics, gpu_index=g.index, model=m.name,
                         processes=procs, pci_bus_id=g.bus, driver_version=nd.driver)
