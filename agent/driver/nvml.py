"""The real driver: NVML through nvidia-ml-py's ``pynvml``.

Thin on purpose: each method is one NVML call and a unit-free conversion of its struct,
so the latency the agent measures per method is the latency of the NVML call itself.
Verified on an H200 against nvidia-smi (docs/gpu-validation.md).
"""

from __future__ import annotations

from typing import Any

import pynvml as nv

from agent.driver.base import EventSet, GpmSample, Handle, ProcessInfo, ProcessUtil, XidEvent

_FI_MEMORY_TEMP = nv.NVML_FI_DEV_MEMORY_TEMP
_FI_PCIE_REPLAY = nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER


def _field_value(h: Handle, field_id: int) -> int:
    """One NVML field; a per-field error is raised like a call error, so NotSupported means absent."""
    value = nv.nvmlDeviceGetFieldValues(h, [field_id])[0]
    if value.nvmlReturn != nv.NVML_SUCCESS:
        raise nv.NVMLError(value.nvmlReturn)
    vt = value.valueType
    if vt == nv.NVML_VALUE_TYPE_DOUBLE:
        return int(value.value.dVal)
    if vt == nv.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(value.value.uiVal)
    if vt == nv.NVML_VALUE_TYPE_SIGNED_INT:
        return int(value.value.siVal)
    if vt == nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(value.value.sllVal)
    return int(value.value.ullVal)


class NvmlDriver:
    """:class:`agent.driver.base.Driver` on the real NVML library."""

    kind = "nvml"

    def init(self) -> None:
        nv.nvmlInit()

    def shutdown(self) -> None:
        nv.nvmlShutdown()

    def driver_version(self) -> str:
        return str(nv.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(nv.nvmlDeviceGetCount())

    def handle_by_index(self, index: int) -> Handle:
        return nv.nvmlDeviceGetHandleByIndex(index)

    def handle_by_uuid(self, uuid: str) -> Handle:
        return nv.nvmlDeviceGetHandleByUUID(uuid)

    def uuid(self, h: Handle) -> str:
        return str(nv.nvmlDeviceGetUUID(h))

    def name(self, h: Handle) -> str:
        return str(nv.nvmlDeviceGetName(h))

    def pci_bus_id(self, h: Handle) -> str:
        bus_id = nv.nvmlDeviceGetPciInfo(h).busId
        return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    def minor_number(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetMinorNumber(h))

    def utilization(self, h: Handle) -> tuple[int, int]:
        u = nv.nvmlDeviceGetUtilizationRates(h)
        return int(u.gpu), int(u.memory)

    def encoder_utilization(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetEncoderUtilization(h)[0])

    def decoder_utilization(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetDecoderUtilization(h)[0])

    def memory(self, h: Handle) -> tuple[int, int, int]:
        m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        return int(m.used), int(m.free), int(m.reserved)

    def power(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetPowerUsage(h))

    def energy(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetTotalEnergyConsumption(h))

    def temperature(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))

    def memory_temperature(self, h: Handle) -> int:
        return _field_value(h, _FI_MEMORY_TEMP)

    def sm_clock(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))

    def mem_clock(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))

    def clocks_event_reasons(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))

    def pcie_replay(self, h: Handle) -> int:
        return _field_value(h, _FI_PCIE_REPLAY)

    def ecc_volatile(self, h: Handle, uncorrected: bool) -> int:
        kind = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED if uncorrected else nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
        return int(nv.nvmlDeviceGetTotalEccErrors(h, kind, nv.NVML_VOLATILE_ECC))

    def pstate(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetPerformanceState(h))

    def power_limit(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetEnforcedPowerLimit(h))

    def pcie_throughput(self, h: Handle) -> tuple[int, int]:
        tx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)
        rx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)
        return int(tx), int(rx)

    def gpm_supported(self, h: Handle) -> bool:
        return bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)

    def gpm_alloc(self) -> GpmSample:
        return nv.nvmlGpmSampleAlloc()

    def gpm_sample(self, h: Handle, sample: GpmSample) -> None:
        nv.nvmlGpmSampleGet(h, sample)

    def gpm_metrics(self, s1: GpmSample, s2: GpmSample, ids: tuple[int, ...]) -> dict[int, float]:
        req: Any = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(ids)
        req.sample1 = s1
        req.sample2 = s2
        for i, metric_id in enumerate(ids):
            req.metrics[i].metricId = metric_id
        nv.nvmlGpmMetricsGet(req)
        out: dict[int, float] = {}
        for i, metric_id in enumerate(ids):
            m = req.metrics[i]
            if m.nvmlReturn == nv.NVML_SUCCESS:
                out[metric_id] = float(m.value)
        return out

    def compute_processes(self, h: Handle) -> list[ProcessInfo]:
        out = []
        for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
            used = p.usedGpuMemory
            out.append(ProcessInfo(int(p.pid), None if used is None else int(used)))
        return out

    def process_utilization(self, h: Handle, since_us: int) -> list[ProcessUtil]:
        samples = nv.nvmlDeviceGetProcessUtilization(h, since_us)
        return [ProcessUtil(int(s.pid), int(s.timeStamp), int(s.smUtil), int(s.memUtil)) for s in samples]

    def mig_enabled(self, h: Handle) -> bool:
        current, _pending = nv.nvmlDeviceGetMigMode(h)
        return bool(current == nv.NVML_DEVICE_MIG_ENABLE)

    def mig_devices(self, h: Handle) -> list[Handle]:
        out = []
        for i in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                out.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
            except nv.NVMLError_NotFound:
                continue
        return out

    def gpu_instance_id(self, h: Handle) -> int:
        return int(nv.nvmlDeviceGetGpuInstanceId(h))

    def event_set(self) -> EventSet:
        return nv.nvmlEventSetCreate()

    def register_xid(self, h: Handle, event_set: EventSet) -> None:
        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, event_set)

    def wait_event(self, event_set: EventSet, timeout_ms: int) -> XidEvent:
        data = nv.nvmlEventSetWait_v2(event_set, timeout_ms)
        return XidEvent(uuid=str(nv.nvmlDeviceGetUUID(data.device)), xid=int(data.eventData))
