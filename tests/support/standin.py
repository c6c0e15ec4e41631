"""A stand-in fleet trace: H200s in phases of idle, training, inference and memory-bound work.

Why here: the codec's tests and its benchmark need a realistic, reproducible record stream
that does not change when the agent's simulator does (the simulated fleet,
``agent.simulate.trace.generate_trace``, is tuned for the detectors). Power with mW
resolution, integer utilisation, slow temperatures, an energy counter refreshed every
fifth sample, four-decimal ratios, bytes/s from MiB/s, and processes that come and go.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from telemetry.records import GpuRecord, ProcessRecord

T0 = 1764489600.0
H200_MIB = 143771



@dataclass
class _Proc:
    record: ProcessRecord
    share: float


@dataclass
class _GpuSim:
    """One simulated H200: phases of idle, training, inference and memory-bound work."""

    index: int
    node: str
    rng: random.Random
    uuid: str = ""
    phase: str = "idle"
    phase_left: float = 0.0
    temp: float = 32.0
    mem_temp: float = 38.0
    energy_mj: float = 0.0
    energy_reported: int = 0
    replay: int = 0
    procs: list[_Proc] = field(default_factory=list)
    step: int = 0

    def __post_init__(self) -> None:
        self.uuid = "GPU-" + str(uuid.UUID(int=self.rng.getrandbits(128)))
        self.energy_mj = self.rng.uniform(1e9, 5e10)

    def _new_proc(self, kind: str, mem: int, share: float) -> _Proc:
        rng = self.rng
        pod = f"{kind}-{rng.randrange(16**5):05x}"
        service = {"trainer": "llm-pretrain", "infer": "chat-api", "etl": "feature-etl"}[kind]
        proc = ProcessRecord(
            pid=rng.randrange(1000, 4_000_000),
            name="python" if kind != "infer" else "tritonserver",
            used_memory_mib=mem,
            sm_util=0,
            mem_util=0,
            namespace={"trainer": "research", "infer": "serving", "etl": "data"}[kind],
            pod=pod,
            container="main",
            service=service,
        )
        return _Proc(proc, share)

    def _start_phase(self) -> None:
        rng = self.rng
        self.phase = rng.choices(["idle", "training", "inference", "memory"], [2, 4, 3, 1])[0]
        self.phase_left = rng.uniform(300, 1200)
        if self.phase == "training":
            self.procs = [self._new_proc("trainer", rng.randrange(60000, 130000), 1.0)]
        elif self.phase == "inference":
            self.procs = [self._new_proc("infer", rng.randrange(8000, 30000), 0.5) for _ in range(rng.randint(1, 3))]
        elif self.phase == "memory":
            self.procs = [self._new_proc("etl", rng.randrange(20000, 90000), 1.0)]
        else:
            self.procs = []

    def sample(self, t: float, interval: float) -> GpuRecord:
        rng = self.rng
        if self.phase_left <= 0:
            self._start_phase()
        self.phase_left -= interval
        phase = self.phase
        if phase == "inference" and rng.random() < 0.004:  # a replica comes or goes
            if len(self.procs) > 1 and rng.random() < 0.5:
                self.procs.pop(rng.randrange(len(self.procs)))
            else:
                self.procs.append(self._new_proc("infer", rng.randrange(8000, 30000), 0.5))
        wave = math.sin(self.step / 37.0)
        if phase == "training":
            util = 97 + rng.gauss(0, 2)
            copy = 20 + rng.gauss(0, 4)
            power = min(700.0, 640 + rng.gauss(0, 30))
            tensor, dram, occ = 0.86 + rng.gauss(0, 0.02), 0.17 + rng.gauss(0, 0.02), 0.14
            pcie_tx, pcie_rx, nvlink = 0.75 + rng.gauss(0, 0.2), 2.3 + rng.gauss(0, 0.4), 18000 + rng.gauss(0, 1500)
        elif phase == "inference":
            util = 45 + 30 * wave + rng.gauss(0, 8)
            copy = 15 + 10 * wave + rng.gauss(0, 3)
            power = 160 + 3.5 * util + rng.gauss(0, 12)
            tensor, dram, occ = 0.3 * util / 100 + rng.gauss(0, 0.02), 0.25 + rng.gauss(0, 0.03), 0.3
            pcie_tx, pcie_rx, nvlink = 40 + rng.gauss(0, 15), 55 + rng.gauss(0, 15), 0.0
        elif phase == "memory":
            util = 70 + rng.gauss(0, 6)
            copy = 80 + rng.gauss(0, 5)
            power = 420 + rng.gauss(0, 20)
            tensor, dram, occ = 0.02, 0.8 + rng.gauss(0, 0.03), 0.5
            pcie_tx, pcie_rx, nvlink = 5 + rng.gauss(0, 1), 900 + rng.gauss(0, 80), 0.0
        else:
            util = copy = 0.0
            power = 76 + rng.gauss(0, 1.2)
            tensor = dram = occ = 0.0
            pcie_tx, pcie_rx, nvlink = 0.01, 0.02, 0.0
        gpu_util = max(0, min(100, round(util)))
        mem_util = max(0, min(100, round(copy)))
        power = round(max(60.0, power), 3)
        capped = power >= 690.0
        self.energy_mj += power * interval * 1000
        if self.step % 5 == 0:  # a slow call: refreshed every fifth sample
            self.energy_reported = int(self.energy_mj)
        self.temp += (30 + power * 0.07 - self.temp) * 0.03 + rng.gauss(0, 0.2)
        self.mem_temp += (36 + power * 0.06 - self.mem_temp) * 0.03 + rng.gauss(0, 0.2)
        if rng.random() < 0.0005:
            self.replay += 1
        fb_used = 512 + sum(p.record.used_memory_mib or 0 for p in self.procs)
        sm_clock = 345 if phase == "idle" else (1785 - 15 * rng.randrange(4) if capped else 1980)
        gr = max(0.0, min(1.0, gpu_util / 100 * 0.98 + rng.gauss(0, 0.01))) if gpu_util else 0.0
        for p in self.procs:
            p_sm = max(0, min(100, round(gpu_util * p.share + rng.gauss(0, 2)))) if gpu_util else 0
            p_mem = max(0, min(100, round(mem_util * p.share + rng.gauss(0, 2)))) if mem_util else 0
            used = p.record.used_memory_mib
            if rng.random() < 0.01:
                used = (used or 0) + rng.choice((-256, 256, 512))
            p.record = replace(p.record, sm_util=p_sm, mem_util=p_mem, used_memory_mib=used)

        def ratio(x: float) -> float:
            return round(max(0.0, min(1.0, x)), 4)

        def per_s(mib: float) -> float:  # GPM reports MiB/s as a full-precision double
            return max(0.0, mib) * 1048576

        metrics: dict[str, float] = {
            "DCGM_FI_DEV_GPU_UTIL": gpu_util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": mem_util,
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_FB_FREE": H200_MIB - fb_used - 527,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_RESERVED": 527,
            "DCGM_FI_DEV_POWER_USAGE": power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.energy_reported,
            "DCGM_FI_DEV_GPU_TEMP": round(self.temp),
            "DCGM_FI_DEV_MEMORY_TEMP": round(self.mem_temp),
            "DCGM_FI_DEV_SM_CLOCK": sm_clock,
            "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x1 if phase == "idle" else (0x4 if capped else 0),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": self.replay,
            "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_PSTATE": 0,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ratio(gr),
            "DCGM_FI_PROF_SM_ACTIVE": ratio(gr * 0.95 + rng.gauss(0, 0.005)) if gr else 0.0,
            "DCGM_FI_PROF_SM_OCCUPANCY": ratio(occ + rng.gauss(0, 0.01)) if gr else 0.0,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ratio(tensor),
            "DCGM_FI_PROF_DRAM_ACTIVE": ratio(dram),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ratio(0.01 + rng.gauss(0, 0.003)) if gr else 0.0,
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.0,
            "DCGM_FI_PROF_PCIE_TX_BYTES": per_s(pcie_tx),
            "DCGM_FI_PROF_PCIE_RX_BYTES": per_s(pcie_rx),
            "DCGM_FI_PROF_NVLINK_TX_BYTES": per_s(nvlink),
            "DCGM_FI_PROF_NVLINK_RX_BYTES": per_s(nvlink * 0.98),
        }
        self.step += 1
        return GpuRecord(
            ts=round(t + rng.gauss(0, 0.002), 6),
            node=self.node,
            gpu=self.uuid,
            metrics=metrics,
            gpu_index=self.index,
            model="NVIDIA H200",
            processes=[
                ProcessRecord(
                    p.record.pid,
                    p.record.name,
                    p.record.used_memory_mib,
                    p.record.sm_util,
                    p.record.mem_util,
                    p.record.namespace,
                    p.record.pod,
                    p.record.container,
                    p.record.service,
                )
                for p in self.procs
            ],
            pci_bus_id=f"00000000:{0x18 + 0x10 * self.index:02X}:00.0",
            driver_version="580.159.04",
        )


def standin_trace(
    gpus: int, seconds: float, interval: float = 1.0, seed: int = 0, node: str = "sim-node-00"
) -> Iterator[GpuRecord]:
    """A fleet trace of the same shape as ``agent.simulate.trace.generate_trace``, for when that is absent.

    Records ordered by time, all GPUs interleaved; power with mW resolution, integer
    utilisation, slow temperatures, an energy counter refreshed every fifth sample,
    four-decimal ratios, bytes/s from MiB/s, and processes that come and go.
    """
    rng = random.Random(seed)
    sims = [_GpuSim(i, node, random.Random(rng.getrandbits(64))) for i in range(gpus)]
    for step in range(int(seconds / interval)):
        for sim in sims:
            yield sim.sample(T0 + step * interval, interval)
