"""A simulated GPU fleet with NVML's semantics, for tests, benchmarks and ``--simulate``.

It behaves like the real driver where the agent could tell the difference: NVML's units
(mW, bytes, mJ), counters that only grow, ``NVMLError_NotSupported`` for what a model
lacks (no GPM before Hopper, no memory temperature on a T4, no utilisation on a MIG
instance), ``NVMLError_NotFound`` from process utilisation when no process runs, GPM
needing two samples at least 100 ms apart (closer ones give zeros,
silently, as on the H200), XID events through an event set, and
``NVMLError_GpuIsLost`` from every call to a GPU that fell off the bus.

Values are pure functions of (seed, GPU, time) plus a little integrated state (energy),
and time comes from an injectable clock, so a one-hour trace renders in seconds and a
test of the scheduler runs on fake time. Workload profiles follow what the H200 showed
(GPU-FACTS.md): a bf16 training loop at ~92% SM active and ~690 W against a 700 W cap,
idle at ~80 W and 345 MHz with clock-event reason 0x1.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import pynvml as nv

from agent.driver.base import Handle, ProcessInfo, ProcessUtil, XidEvent
from telemetry.clocks import ClockEventReason
from telemetry.xid import GPU_LOST

Profile = Literal["idle", "training", "serving", "batch"]
PROFILES: tuple[Profile, ...] = ("training", "serving", "batch", "idle")
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_mib: int
    power_limit_w: float
    idle_w: float
    max_sm_mhz: int
    mem_mhz: int
    gpm: bool
    memory_temp: bool


MODELS: dict[str, GpuModel] = {
    "NVIDIA H200": GpuModel("NVIDIA H200", 143771, 700.0, 80.0, 1980, 3201, True, True),
    "NVIDIA A100-SXM4-80GB": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400.0, 60.0, 1410, 1593, False, True),
    "Tesla T4": GpuModel("Tesla T4", 15360, 70.0, 10.0, 1590, 5001, False, False),
}


@dataclass(frozen=True, slots=True)
class SimHandle:
    index: int
    mig: int | None = None


@dataclass(slots=True)
class _Gpu:
    index: int
    model: GpuModel
    profile: Profile
    uuid: str
    mig_profiles: list[str]
    lost: bool = False
    energy_mj: float = 0.0
    energy_t: float | None = None


@dataclass(slots=True)
class SimGpmSample:
    t: float | None = None
    handle: SimHandle | None = None


@dataclass(frozen=True, slots=True)
class SimProcess:
    pid: int
    used_mib: int
    namespace: str
    pod: str
    container: str
    service: str
    name: str


@dataclass(frozen=True, slots=True)
class _State:
    load: float  # 0..1 SM activity
    tensor: float
    dram: float
    mem_frac: float
    procs: tuple[SimProcess, ...]


def _noise(*parts: float) -> float:
    """Deterministic noise in [0, 1) from integers: cheap, reproducible, no RNG state."""
    h = 0x9E3779B9
    for p in parts:
        h = ((h ^ int(p)) * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
    return ((h * 0xC2B2AE35) & 0xFFFFFFFF) / 4294967296.0


def _err(code: int) -> nv.NVMLError:
    return nv.NVMLError(code)


class SimulatedFleet:
    """:class:`agent.driver.base.Driver` over N simulated GPUs on one node."""

    kind = "simulated"

    def __init__(
        self,
        count: int,
        *,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        profiles: Sequence[Profile] | None = None,
        models: Sequence[str] | None = None,
        mig: dict[int, list[str]] | None = None,
        start: float | None = None,
    ) -> None:
        self.seed = seed
        self.clock = clock
        self.start = clock() if start is None else start
        self._lock = threading.Lock()
        self._event = threading.Condition(self._lock)
        self._initialised = False
        mig = mig or {}
        self.gpus: list[_Gpu] = []
        for i in range(count):
            model = MODELS[models[i % len(models)] if models else "NVIDIA H200"]
            profile = profiles[i % len(profiles)] if profiles else PROFILES[i % len(PROFILES)]
            uid = f"GPU-{seed:08x}-{i:04x}-4000-8000-{(seed * 7919 + i):012x}"
            self.gpus.append(_Gpu(i, model, profile, uid, list(mig.get(i, []))))
        self._pending: deque[XidEvent] = deque()

    # ---- fault injection (tests, benchmarks) ----
    def fail(self, index: int) -> None:
        """The GPU falls off the bus: every call raises GpuIsLost until :meth:`recover`."""
        self.gpus[index].lost = True

    def recover(self, index: int) -> None:
        self.gpus[index].lost = False

    def inject_xid(self, index: int, xid: int) -> None:
        """Deliver an XID event; XID 79 (fallen off the bus) also marks the GPU lost."""
        with self._event:
            self._pending.append(XidEvent(self.gpus[index].uuid, xid))
            if xid == GPU_LOST.code:
                self.gpus[index].lost = True
            self._event.notify_all()

    # ---- lifecycle ----
    def init(self) -> None:
        self._initialised = True

    def shutdown(self) -> None:
        self._initialised = False
        with self._event:
            self._event.notify_all()

    def driver_version(self) -> str:
        return "580.159.04-sim"

    def device_count(self) -> int:
        return len(self.gpus)

    def handle_by_index(self, index: int) -> Handle:
        if not 0 <= index < len(self.gpus):
            raise _err(nv.NVML_ERROR_INVALID_ARGUMENT)
        return SimHandle(index)

    def handle_by_uuid(self, uuid: str) -> Handle:
        for g in self.gpus:
            if g.uuid == uuid:
                if g.lost:
                    raise _err(nv.NVML_ERROR_GPU_IS_LOST)
                return SimHandle(g.index)
            for m, _ in enumerate(g.mig_profiles):
                if self._mig_uuid(g, m) == uuid:
                    return SimHandle(g.index, m)
        raise _err(nv.NVML_ERROR_NOT_FOUND)

    # ---- helpers ----
    def _gpu(self, h: SimHandle) -> _Gpu:
        g = self.gpus[h.index]
        if g.lost:
            raise _err(nv.NVML_ERROR_GPU_IS_LOST)
        return g

    def _whole(self, h: SimHandle) -> _Gpu:
        """A device-level counter: NotSupported on a MIG instance handle (it lives on the GPU)."""
        g = self._gpu(h)
        if h.mig is not None:
            raise _err(nv.NVML_ERROR_NOT_SUPPORTED)
        return g

    def _not_in_mig(self, h: SimHandle) -> _Gpu:
        """Utilisation-type calls: NotSupported on an instance and on a GPU in MIG mode."""
        g = self._whole(h)
        if g.mig_profiles:
            raise _err(nv.NVML_ERROR_NOT_SUPPORTED)
        return g

    @staticmethod
    def _mig_uuid(g: _Gpu, m: int) -> str:
        return f"MIG-{g.uuid[4:-4]}{m:04x}"

    def _t(self) -> float:
        return self.clock() - self.start

    def state(self, index: int, t: float | None = None) -> _State:
        """The workload's state at time t (seconds since the fleet started)."""
        g = self.gpus[index]
        t = self._t() if t is None else t
        s, i = self.seed, g.index
        n = _noise(s, i, math.floor(t * 2))
        if g.mig_profiles or g.profile == "idle":
            return _State(0.0, 0.0, 0.0, 0.004, ())
        if g.profile == "training":
            cycle = t % 1800.0
            load = 0.50 + 0.05 * n if cycle >= 1700.0 else 0.915 + 0.02 * (n - 0.5)
            if t % 3600.0 < 30.0:  # checkpoint
                load = 0.05 + 0.05 * n
            proc = SimProcess(10000 + 100 * i, int(g.model.memory_mib * 0.83), "research",
                              f"trainer-{s % 97:02d}{i // 4}-0", "main", "llm-pretrain", "python")
            return _State(load, load * 0.97, 0.168 + 0.02 * n, 0.835, (proc,))
        if g.profile == "serving":
            wave = 0.5 + 0.5 * math.sin(2 * math.pi * t / 600.0 + i)
            burst = 0.25 if _noise(s, i, math.floor(t / 20)) > 0.9 else 0.0
            load = min(1.0, 0.15 + 0.45 * wave + burst + 0.04 * (n - 0.5))
            procs = tuple(
                SimProcess(20000 + 100 * i + k, int(g.model.memory_mib * 0.24), "inference",
                           f"llm-serve-7d9f8b-{i:02d}", "server", "llm-serve", "vllm")
                for k in range(2)
            )
            return _State(load, load * 0.8, 0.35 * load + 0.02 * n, 0.49, procs)
        # batch: jobs of 300-900 s separated by 120-600 s gaps, a new pid per job
        job_len = 600.0 + 300.0 * (2 * _noise(s, i, 7) - 1)
        gap = 120.0 + 480.0 * _noise(s, i, 11)
        period = job_len + gap
        job = math.floor(t / period)
        if t - job * period >= job_len:
            return _State(0.0, 0.0, 0.0, 0.004, ())
        load = 0.7 + 0.2 * _noise(s, i, job) + 0.05 * (n - 0.5)
        proc = SimProcess(30000 + 1000 * i + job % 1000, int(g.model.memory_mib * 0.4), "batch",
                          f"etl-job-{job:05d}-{i}", "worker", "etl-batch", "python3")
        return _State(load, 0.3 * load, 0.6 * load, 0.41, (proc,))

    def _power_w(self, g: _Gpu, st: _State, t: float) -> float:
        m = g.model
        n = _noise(self.seed, g.index, math.floor(t * 4), 3)
        watts = m.idle_w + (m.power_limit_w - m.idle_w) * min(1.0, st.load * 1.02) + 6.0 * (n - 0.5)
        return max(m.idle_w * 0.8, min(m.power_limit_w - 0.5, watts))

    # ---- identity ----
    def uuid(self, h: Handle) -> str:
        g = self._gpu(h)
        return g.uuid if h.mig is None else self._mig_uuid(g, h.mig)

    def name(self, h: Handle) -> str:
        g = self._gpu(h)
        return g.model.name if h.mig is None else f"{g.model.name} MIG {g.mig_profiles[h.mig]}"

    def pci_bus_id(self, h: Handle) -> str:
        return f"00000000:{0x18 + 0x10 * self._gpu(h).index:02X}:00.0"

    def minor_number(self, h: Handle) -> int:
        return int(self._gpu(h).index)

    # ---- counters ----
    def utilization(self, h: Handle) -> tuple[int, int]:
        g = self._not_in_mig(h)
        st = self.state(g.index)
        util = 0 if st.load < 0.02 else min(100, round(st.load * 100 + 6))
        return util, round(st.dram * 100 * 1.1)

    def encoder_utilization(self, h: Handle) -> int:
        self._not_in_mig(h)
        return 0

    def decoder_utilization(self, h: Handle) -> int:
        self._not_in_mig(h)
        return 0

    def memory(self, h: Handle) -> tuple[int, int, int]:
        g = self._gpu(h)
        total = g.model.memory_mib * MIB
        if h.mig is not None:
            slices = int(g.mig_profiles[h.mig].split("g.")[0])
            total = total * slices // 7
            used = 13 * MIB
        else:
            used = int(total * self.state(g.index).mem_frac)
        reserved = 460 * MIB
        return used, total - used - reserved, reserved

    def power(self, h: Handle) -> int:
        g = self._whole(h)
        t = self._t()
        return round(self._power_w(g, self.state(g.index, t), t) * 1000)

    def energy(self, h: Handle) -> int:
        g = self._whole(h)
        t = self._t()
        with self._lock:
            watts = self._power_w(g, self.state(g.index, t), t)
            if g.energy_t is None:
                g.energy_mj = 1.0e9 + 7.3e7 * g.index
            elif t > g.energy_t:
                g.energy_mj += watts * (t - g.energy_t) * 1000.0
            g.energy_t = t if g.energy_t is None else max(g.energy_t, t)
            return int(g.energy_mj)

    def temperature(self, h: Handle) -> int:
        g = self._whole(h)
        t = self._t()
        lagged = 0.6 * self.state(g.index, t).load + 0.4 * self.state(g.index, max(0.0, t - 60)).load
        return round(32 + 40 * lagged + 1.2 * _noise(self.seed, g.index, math.floor(t / 5), 5))

    def memory_temperature(self, h: Handle) -> int:
        g = self._whole(h)
        if not g.model.memory_temp:
            raise _err(nv.NVML_ERROR_NOT_SUPPORTED)
        return self.temperature(h) + 4

    def sm_clock(self, h: Handle) -> int:
        g = self._whole(h)
        st = self.state(g.index)
        if st.load < 0.02:
            return 345
        if st.load > 0.85:  # power-capped: clocks pulled down from max
            return 1485 + 15 * round(10 * _noise(self.seed, g.index, math.floor(self._t())))
        return g.model.max_sm_mhz

    def mem_clock(self, h: Handle) -> int:
        return self._whole(h).model.mem_mhz

    def clocks_event_reasons(self, h: Handle) -> int:
        g = self._whole(h)
        st = self.state(g.index)
        if st.load < 0.02:
            return int(ClockEventReason.GPU_IDLE)
        return int(ClockEventReason.SW_POWER_CAP) if st.load > 0.85 else 0

    def pcie_replay(self, h: Handle) -> int:
        g = self._whole(h)
        return int(self._t() // 7200) if g.index % 5 == 4 else 0

    def ecc_volatile(self, h: Handle, uncorrected: bool) -> int:
        g = self._whole(h)
        if uncorrected:
            return 0
        return int(self._t() // 900) if g.index % 4 == 3 else 0

    def pstate(self, h: Handle) -> int:
        self._whole(h)
        return 0  # data-center GPUs stay in P0 when idle, as the H200 did

    def power_limit(self, h: Handle) -> int:
        return round(self._whole(h).model.power_limit_w * 1000)

    def pcie_throughput(self, h: Handle) -> tuple[int, int]:
        self._whole(h)
        return 768, 2386

    # ---- GPM ----
    def gpm_supported(self, h: Handle) -> bool:
        return self._gpu(h).model.gpm

    def gpm_alloc(self) -> SimGpmSample:
        return SimGpmSample()

    def gpm_sample(self, h: Handle, sample: SimGpmSample) -> None:
        g = self._gpu(h)
        if not g.model.gpm:
            raise _err(nv.NVML_ERROR_NOT_SUPPORTED)
        sample.t = self._t()
        sample.handle = h

    def gpm_metrics(self, s1: SimGpmSample, s2: SimGpmSample, ids: tuple[int, ...]) -> dict[int, float]:
        if s1.t is None or s2.t is None or s1.handle != s2.handle or s2.handle is None:
            raise _err(nv.NVML_ERROR_INVALID_ARGUMENT)
        g = self._gpu(s2.handle)
        if abs(s2.t - s1.t) < 0.1:
            # what the H200 did with two samples back to back: success, and zeros
            return dict.fromkeys(ids, 0.0)
        st = self.state(g.index, (s1.t + s2.t) / 2)
        q = _noise(self.seed, g.index, math.floor(s2.t * 10), 9)
        pct = {
            nv.NVML_GPM_METRIC_GRAPHICS_UTIL: min(100.0, st.load * 104.0),
            nv.NVML_GPM_METRIC_SM_UTIL: st.load * 100.0,
            nv.NVML_GPM_METRIC_SM_OCCUPANCY: st.load * 14.9 + q,
            nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL: st.tensor * 100.0,
            nv.NVML_GPM_METRIC_DRAM_BW_UTIL: st.dram * 100.0,
            nv.NVML_GPM_METRIC_FP64_UTIL: 0.0,
            nv.NVML_GPM_METRIC_FP32_UTIL: st.load * 1.3 * q,
            nv.NVML_GPM_METRIC_FP16_UTIL: 0.0,
            nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 0.75 + 0.5 * st.load * q,
            nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 2.33 + 40.0 * st.load * q,
            nv.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 0.0,  # a lone GPU: zero, as the H200 answered
            nv.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 0.0,
        }
        return {i: pct[i] for i in ids if i in pct}

    # ---- processes ----
    def processes(self, index: int) -> tuple[SimProcess, ...]:
        return self.state(index).procs

    def compute_processes(self, h: Handle) -> list[ProcessInfo]:
        g = self._gpu(h)
        if h.mig is not None:
            return []
        return [ProcessInfo(p.pid, p.used_mib * MIB) for p in self.state(g.index).procs]

    def process_utilization(self, h: Handle, since_us: int) -> list[ProcessUtil]:
        g = self._not_in_mig(h)
        st = self.state(g.index)
        if not st.procs:
            raise _err(nv.NVML_ERROR_NOT_FOUND)
        now_us = int(self.clock() * 1e6)
        share = len(st.procs)
        return [
            ProcessUtil(p.pid, now_us, round(st.load * 93 / share), round(st.dram * 110 / share))
            for p in st.procs
        ]

    # ---- MIG ----
    def mig_enabled(self, h: Handle) -> bool:
        g = self._gpu(h)
        if g.model.name == "Tesla T4":
            raise _err(nv.NVML_ERROR_NOT_SUPPORTED)
        return bool(g.mig_profiles) and h.mig is None

    def mig_devices(self, h: Handle) -> list[Handle]:
        g = self._gpu(h)
        return [SimHandle(g.index, m) for m in range(len(g.mig_profiles))]

    def gpu_instance_id(self, h: Handle) -> int:
        if h.mig is None:
            raise _err(nv.NVML_ERROR_INVALID_ARGUMENT)
        return 1 + int(h.mig)

    # ---- XID events ----
    def event_set(self) -> object:
        return object()

    def register_xid(self, h: Handle, event_set: object) -> None:
        self._gpu(h)

    def wait_event(self, event_set: object, timeout_ms: int) -> XidEvent:
        with self._event:
            if not self._pending and self._initialised:
                self._event.wait(timeout_ms / 1000.0)
            if not self._pending:
                raise _err(nv.NVML_ERROR_TIMEOUT)
            return self._pending.popleft()

    # ---- identities for the simulated attributor ----
    def identity(self, pid: int) -> SimProcess | None:
        for g in self.gpus:
            for p in self.state(g.index).procs:
                if p.pid == pid:
                    return p
        return None
