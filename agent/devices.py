"""GPU discovery: whole GPUs and MIG instances, and which sources each one supports.

Discovery probes every source once per GPU. ``NotSupported`` removes the source for
that GPU, so an unsupported metric is absent rather than 0 (TELEMETRY.md). A GPU in MIG
mode is listed with its instances, each labelled with its GPU instance id and profile
(as dcgm-exporter's ``GPU_I_ID`` and ``GPU_I_PROFILE``); a failure to enumerate MIG is
logged and never stops the agent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pynvml as nv

from agent.driver.base import Driver, Handle
from agent.gpm import GpmState
from agent.readers import READERS

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GpuTarget:
    """One sampled unit: a whole GPU, or one MIG instance of a GPU."""

    key: str  # the UUID (GPU-... or MIG-...)
    index: int
    handle: Handle
    model: str
    pci_bus_id: str
    minor: int
    sources: list[str]
    gpm: GpmState | None = None
    processes: bool = True
    mig_profile: str | None = None
    gpu_instance_id: int | None = None
    parent: str | None = None
    mig_parent: bool = False  # a GPU in MIG mode: most device-level calls are NotSupported
    healthy: bool = True
    retry_at: float = 0.0
    retry_backoff: float = 1.0
    last_metrics: dict[str, float] = field(default_factory=dict)


def _probe_sources(driver: Driver, h: Handle) -> list[str]:
    supported = []
    scratch: dict[str, float] = {}
    for source, reader in READERS.items():
        try:
            reader(driver, h, scratch)
        except nv.NVMLError_NotSupported:
            continue
        except nv.NVMLError as exc:  # transient at start: keep it, errors are counted later
            log.info("probe of %s failed (%s); keeping it", source, exc)
        supported.append(source)
    return supported


def _gpm_state(driver: Driver, h: Handle) -> GpmState | None:
    try:
        return GpmState.create(driver) if driver.gpm_supported(h) else None
    except nv.NVMLError as exc:
        log.info("GPM not available: %s", exc)
        return None


def _mig_profile(name: str) -> str | None:
    """'NVIDIA H200 MIG 1g.18gb' -> '1g.18gb' (NVML names MIG devices this way)."""
    marker = " MIG "
    return name.split(marker, 1)[1].strip() if marker in name else None


def describe(driver: Driver, index: int, h: Handle) -> list[GpuTarget]:
    """The targets for GPU ``index``: itself, plus its MIG instances if MIG is on."""
    uuid = driver.uuid(h)
    model = driver.name(h)
    pci = driver.pci_bus_id(h)
    try:
        minor = driver.minor_number(h)
    except nv.NVMLError:
        minor = index
    try:
        mig = driver.mig_enabled(h)
    except nv.NVMLError:
        mig = False
    parent = GpuTarget(
        key=uuid, index=index, handle=h, model=model, pci_bus_id=pci, minor=minor,
        sources=_probe_sources(driver, h), gpm=_gpm_state(driver, h), mig_parent=mig,
    )
    targets = [parent]
    if not mig:
        return targets
    parent.processes = False  # per-process data is read per instance under MIG
    try:
        instances = driver.mig_devices(h)
    except nv.NVMLError as exc:
        log.warning("GPU %d is in MIG mode but its instances could not be listed: %s", index, exc)
        return targets
    for mh in instances:
        try:
            name = driver.name(mh)
            targets.append(GpuTarget(
                key=driver.uuid(mh), index=index, handle=mh, model=model, pci_bus_id=pci, minor=minor,
                sources=_probe_sources(driver, mh), processes=True,
                mig_profile=_mig_profile(name), gpu_instance_id=driver.gpu_instance_id(mh), parent=uuid,
            ))
        except nv.NVMLError as exc:
            log.warning("MIG instance on GPU %d skipped: %s", index, exc)
    return targets


def discover(driver: Driver) -> list[GpuTarget]:
    targets: list[GpuTarget] = []
    for index in range(driver.device_count()):
        try:
            targets.extend(describe(driver, index, driver.handle_by_index(index)))
        except nv.NVMLError as exc:
            log.error("GPU %d could not be opened (%s); it will not be sampled", index, exc)
    return targets
