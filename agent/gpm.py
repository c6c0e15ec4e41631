"""GPM: DCGM's profiling metrics from NVML's GPU Performance Monitoring (Hopper and newer).

GPM needs two samples at least 100 ms apart; each ``nvmlGpmSampleGet`` cost ~0.75 ms on
an H200 while turning two samples into 30 metrics cost 2-4 µs. So each GPU keeps two
sample buffers and alternates them: one ``gpm_sample`` call per GPU sample, and the
metrics cover the whole interval since the previous sample (an average, like DCGM's).
Unlike DCGM's profiling module, GPM does not lock out Nsight or CUPTI users.

GPM reports percent and MiB/s; DCGM's keys are ratios and bytes/s: each catalog row's
``nvml_divisor`` says how to turn one into the other. This module only knows which GPM
metric id yields which key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml as nv

from agent.driver.base import Driver, GpmSample, Handle
from telemetry import keys as k
from telemetry.catalog import BY_KEY

MIN_GAP_S = 0.1

# catalog key -> GPM metric id
GPM_METRICS: dict[str, int] = {
    k.GR_ENGINE_ACTIVE: nv.NVML_GPM_METRIC_GRAPHICS_UTIL,
    k.SM_ACTIVE: nv.NVML_GPM_METRIC_SM_UTIL,
    k.SM_OCCUPANCY: nv.NVML_GPM_METRIC_SM_OCCUPANCY,
    k.PIPE_TENSOR_ACTIVE: nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    k.DRAM_ACTIVE: nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
    k.PIPE_FP64_ACTIVE: nv.NVML_GPM_METRIC_FP64_UTIL,
    k.PIPE_FP32_ACTIVE: nv.NVML_GPM_METRIC_FP32_UTIL,
    k.PIPE_FP16_ACTIVE: nv.NVML_GPM_METRIC_FP16_UTIL,
    k.PCIE_TX_BYTES: nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    k.PCIE_RX_BYTES: nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    k.NVLINK_TX_BYTES: nv.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    k.NVLINK_RX_BYTES: nv.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
}
_IDS = tuple(GPM_METRICS.values())
# GPM metric id -> (catalog key, divisor to DCGM units), resolved once
_BY_ID = {metric_id: (key, BY_KEY[key].nvml_divisor) for key, metric_id in GPM_METRICS.items()}


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
                key, divisor = _BY_ID[metric_id]
                last[key] = value / divisor
            self.last = last
            out.update(last)
        self.newest = target
        self.newest_t = now
