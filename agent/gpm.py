"""GPM: DCGM's profiling metrics from NVML's GPU Performance Monitoring (Hopper and newer).

GPM needs two samples at least 100 ms apart; each ``nvmlGpmSampleGet`` cost ~0.75 ms on
an H200 while turning two samples into 30 metrics cost 2-4 µs. So each GPU keeps two
sample buffers and alternates them: one ``gpm_sample`` call per GPU sample, and the
metrics cover the whole interval since the previous sample (an average, like DCGM's).
Unlike DCGM's profiling module, GPM does not lock out Nsight or CUPTI users.

GPM reports percent and MiB/s; DCGM's keys are ratios and bytes/s, hence the scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml as nv

from agent.driver.base import Driver, GpmSample, Handle

MIN_GAP_S = 0.1

# catalog key -> (GPM metric id, scale to DCGM units)
GPM_METRICS: dict[str, tuple[int, float]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (nv.NVML_GPM_METRIC_GRAPHICS_UTIL, 0.01),
    "DCGM_FI_PROF_SM_ACTIVE": (nv.NVML_GPM_METRIC_SM_UTIL, 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": (nv.NVML_GPM_METRIC_SM_OCCUPANCY, 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": (nv.NVML_GPM_METRIC_DRAM_BW_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (nv.NVML_GPM_METRIC_FP64_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (nv.NVML_GPM_METRIC_FP32_UTIL, 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (nv.NVML_GPM_METRIC_FP16_UTIL, 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC, float(1 << 20)),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC, float(1 << 20)),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (nv.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, float(1 << 20)),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": (nv.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, float(1 << 20)),
}
_IDS = tuple(metric_id for metric_id, _ in GPM_METRICS.values())
_BY_ID = {metric_id: (key, scale) for key, (metric_id, scale) in GPM_METRICS.items()}


@dataclass(slots=True)
class GpmState:
    """Two alternating sample buffers for one GPU, and the time of the newer one."""

    buffers: tuple[GpmSample, GpmSample]
    newest: int = -1
    newest_t: float = 0.0
    last: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, driver: Driver) -> GpmState:
        return cls((driver.gpm_alloc(), driver.gpm_alloc()))

    def sample(self, driver: Driver, h: Handle, now: float, out: dict[str, float]) -> None:
        """Take one GPM sample and, given an older one ≥100 ms before, write the metrics.

        Closer than 100 ms (a burst of fast samples) the newer buffer is kept as the base
        and the previous metrics are reported again, so GPM's rule is never broken.
        """
        if self.newest >= 0 and now - self.newest_t < MIN_GAP_S:
            out.update(self.last)
            return
        target = 1 - self.newest if self.newest >= 0 else 0
        driver.gpm_sample(h, self.buffers[target])
        if self.newest >= 0:
            values = driver.gpm_metrics(self.buffers[self.newest], self.buffers[target], _IDS)
            last = {}
            for metric_id, value in values.items():
                key, scale = _BY_ID[metric_id]
                last[key] = value * scale
            self.last = last
            out.update(last)
        self.newest = target
        self.newest_t = now
