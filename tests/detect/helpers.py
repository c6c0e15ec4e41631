"""Small hand-made traces for detector tests: a few GPUs, 1 Hz, explicit faults."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from collector.detect import Anomaly, AnomalyLog, DetectionEngine, DetectorConfig
from telemetry.records import GpuRecord, ProcessRecord

T0 = 1_764_489_600.0
TOTAL = 143771.0


def record(t: float, gpu: int, *, sm: float = 0.9, clock: float = 1485.0, temp: float = 70.0, reasons: int = 0x4,
           fb: float = 0.5 * TOTAL, pid: int | None = 100, pod: str = "job-0", service: str = "svc",
           node: str = "n0", xid: int = 0, dbe: float = 0.0, sbe: float = 0.0, replay: float = 0.0,
           **extra: float) -> GpuRecord:
    """One record; ``extra`` adds metrics by DCGM field name without the ``DCGM_FI_`` prefix
    (``DEV_GPU_UTIL=32``, ``PROF_DRAM_ACTIVE=0.8``)."""
    procs = [] if pid is None else [ProcessRecord(pid=pid, namespace="ns", pod=pod, service=service)]
    if pod == "":
        procs = [] if pid is None else [ProcessRecord(pid=pid)]
    return GpuRecord(T0 + t, node, f"GPU-{node}-{gpu}", {
        "DCGM_FI_PROF_SM_ACTIVE": sm, "DCGM_FI_DEV_SM_CLOCK": clock, "DCGM_FI_DEV_GPU_TEMP": temp,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(reasons), "DCGM_FI_DEV_FB_USED": float(round(fb)),
        "DCGM_FI_DEV_FB_FREE": float(round(TOTAL - fb)), "DCGM_FI_DEV_XID_ERRORS": float(xid),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": replay, "DCGM_FI_DEV_POWER_USAGE": 690.0,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
        **{f"DCGM_FI_{k}": v for k, v in extra.items()},
    }, gpu_index=gpu, processes=procs)


def trace(seconds: int, gpus: int, make: Callable[[float, int], GpuRecord | None]) -> Iterator[GpuRecord]:
    for s in range(seconds):
        for g in range(gpus):
            rec = make(float(s), g)
            if rec is not None:
                yield rec


def run(records: Iterable[GpuRecord], config: DetectorConfig | None = None) -> list[Anomaly]:
    """The anomalies a fresh engine opens over ``records``, in order."""
    engine = DetectionEngine(config)
    log = AnomalyLog()
    for rec in records:
        log.add(engine.feed(rec))
    return log.anomalies


def kinds(anomalies: list[Anomaly]) -> list[tuple[str, str]]:
    return [(a.kind, a.gpu) for a in anomalies]
