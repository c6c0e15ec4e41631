"""The metric keys as named constants, so code outside the catalog never spells a DCGM name.

Why a module of names: every key is a DCGM field name (``DCGM_FI_...``) that the agent
writes, the codec carries, the collector stores and detects on, and users' dashboards
query. Spelled as string literals in each of those places, a typo is a metric that is
silently absent (``metrics.get(...)`` returns None). Here each name is written once; the
catalog's rows (:mod:`telemetry.catalog`) are built from these constants and a lint test
(``tests/test_catalog_lint.py``) refuses a ``"DCGM_FI_"`` literal in ``agent/``,
``collector/`` or ``gpuwatch/``. The constant is the key without its ``DCGM_FI_DEV_`` or
``DCGM_FI_PROF_`` prefix. The host-evidence keys (``gpuwatch_...``, not DCGM fields) are
named for what they measure.
"""

from __future__ import annotations

from typing import Final

#: The prefix every catalog key starts with (DCGM's field-name prefix).
PREFIX: Final = "DCGM_FI_"

GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL: Final = "DCGM_FI_DEV_MEM_COPY_UTIL"
ENC_UTIL: Final = "DCGM_FI_DEV_ENC_UTIL"
DEC_UTIL: Final = "DCGM_FI_DEV_DEC_UTIL"
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
FB_RESERVED: Final = "DCGM_FI_DEV_FB_RESERVED"
POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
TOTAL_ENERGY_CONSUMPTION: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
MEMORY_TEMP: Final = "DCGM_FI_DEV_MEMORY_TEMP"
SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK: Final = "DCGM_FI_DEV_MEM_CLOCK"
CLOCKS_EVENT_REASONS: Final = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
PCIE_REPLAY_COUNTER: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
ECC_SBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
PSTATE: Final = "DCGM_FI_DEV_PSTATE"
POWER_MGMT_LIMIT: Final = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"
SM_OCCUPANCY: Final = "DCGM_FI_PROF_SM_OCCUPANCY"
PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"
PIPE_FP64_ACTIVE: Final = "DCGM_FI_PROF_PIPE_FP64_ACTIVE"
PIPE_FP32_ACTIVE: Final = "DCGM_FI_PROF_PIPE_FP32_ACTIVE"
PIPE_FP16_ACTIVE: Final = "DCGM_FI_PROF_PIPE_FP16_ACTIVE"
PCIE_TX_BYTES: Final = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX_BYTES: Final = "DCGM_FI_PROF_PCIE_RX_BYTES"
NVLINK_TX_BYTES: Final = "DCGM_FI_PROF_NVLINK_TX_BYTES"
NVLINK_RX_BYTES: Final = "DCGM_FI_PROF_NVLINK_RX_BYTES"

# Host evidence (issue 14): read by the agent from /proc, the cgroup tree and PSI for the processes
# of a GPU. Not DCGM fields, so gpuwatch_-prefixed (they never collide with node-exporter's or
# cAdvisor's series on the same Prometheus) and in node-exporter's units (cores, ratios).
PROCESS_CPU_CORES: Final = "gpuwatch_process_cpu_cores"
PROCESS_BUSIEST_THREAD_RATIO: Final = "gpuwatch_process_busiest_thread_ratio"
PROCESS_RUNQUEUE_WAIT_CORES: Final = "gpuwatch_process_runqueue_wait_cores"
PROCESS_BLOCKED_THREADS: Final = "gpuwatch_process_blocked_threads"
PROCESS_SLEEPING_RATIO: Final = "gpuwatch_process_sleeping_ratio"
CONTAINER_CPU_USAGE_CORES: Final = "gpuwatch_container_cpu_usage_cores"
CONTAINER_CPU_LIMIT_CORES: Final = "gpuwatch_container_cpu_limit_cores"
CONTAINER_CPU_THROTTLED_RATIO: Final = "gpuwatch_container_cpu_throttled_ratio"
NODE_CPU_BUSY_RATIO: Final = "gpuwatch_node_cpu_busy_ratio"
NODE_PRESSURE_CPU_WAITING_RATIO: Final = "gpuwatch_node_pressure_cpu_waiting_ratio"
NODE_PRESSURE_MEMORY_WAITING_RATIO: Final = "gpuwatch_node_pressure_memory_waiting_ratio"
NODE_PRESSURE_IO_WAITING_RATIO: Final = "gpuwatch_node_pressure_io_waiting_ratio"

# Inference-server signals (issue 14; telemetry/catalog.py says what each holds). Not DCGM fields:
# snake_case with a gpuwatch_ prefix, so they never collide with another exporter's names.
INFERENCE_REQUESTS_PER_SECOND: Final = "gpuwatch_inference_requests_per_second"
INFERENCE_QUEUE_SECONDS: Final = "gpuwatch_inference_queue_seconds"
INFERENCE_COMPUTE_SECONDS: Final = "gpuwatch_inference_compute_seconds"
INFERENCE_PENDING_REQUESTS: Final = "gpuwatch_inference_pending_requests"
INFERENCE_RUNNING_REQUESTS: Final = "gpuwatch_inference_running_requests"
INFERENCE_TTFT_SECONDS: Final = "gpuwatch_inference_ttft_seconds"
INFERENCE_KV_CACHE_RATIO: Final = "gpuwatch_inference_kv_cache_ratio"

#: dcgm-exporter's driver-version label on every series (a label, not a metric).
DRIVER_VERSION_LABEL: Final = "DCGM_FI_DRIVER_VERSION"


def short_name(key: str) -> str:
    """A key without DCGM's ``DCGM_FI_`` prefix, as summaries print it (``DEV_POWER_USAGE``)."""
    return key.removeprefix(PREFIX)
