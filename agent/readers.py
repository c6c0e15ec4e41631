"""Readers: one per catalog ``source``, each one driver call turned into DCGM-unit metrics.

The catalog names a source for every metric; this table is its other half. A test
checks that every polled source in the catalog has a reader here and that the readers
write exactly the catalog's keys for their source. GPM and XID metrics have no reader:
they come from :mod:`agent.gpm` and the XID event thread.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.driver.base import Driver, Handle

Metrics = dict[str, float]
Reader = Callable[[Driver, Handle, Metrics], None]
MIB = 1 << 20


def _utilization(d: Driver, h: Handle, out: Metrics) -> None:
    gpu, mem = d.utilization(h)
    out["DCGM_FI_DEV_GPU_UTIL"] = gpu
    out["DCGM_FI_DEV_MEM_COPY_UTIL"] = mem


def _encoder(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_ENC_UTIL"] = d.encoder_utilization(h)


def _decoder(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_DEC_UTIL"] = d.decoder_utilization(h)


def _memory(d: Driver, h: Handle, out: Metrics) -> None:
    used, free, reserved = d.memory(h)
    # rounded up to whole MiB: that is what nvidia-smi shows (checked on the H200: truncating
    # read 1 MiB low on all three, rounding to nearest still 1 MiB low on free and reserved)
    out["DCGM_FI_DEV_FB_USED"] = -(-used // MIB)
    out["DCGM_FI_DEV_FB_FREE"] = -(-free // MIB)
    out["DCGM_FI_DEV_FB_RESERVED"] = -(-reserved // MIB)


def _power(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_POWER_USAGE"] = d.power(h) / 1000.0


def _energy(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = d.energy(h)


def _temperature(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_GPU_TEMP"] = d.temperature(h)


def _memory_temperature(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_MEMORY_TEMP"] = d.memory_temperature(h)


def _sm_clock(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_SM_CLOCK"] = d.sm_clock(h)


def _mem_clock(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_MEM_CLOCK"] = d.mem_clock(h)


def _clocks_event_reasons(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = d.clocks_event_reasons(h)


def _pcie_replay(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] = d.pcie_replay(h)


def _ecc_sbe(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] = d.ecc_volatile(h, uncorrected=False)


def _ecc_dbe(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = d.ecc_volatile(h, uncorrected=True)


def _pstate(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_PSTATE"] = d.pstate(h)


def _power_limit(d: Driver, h: Handle, out: Metrics) -> None:
    out["DCGM_FI_DEV_POWER_MGMT_LIMIT"] = d.power_limit(h) / 1000.0


READERS: dict[str, Reader] = {
    "utilization": _utilization,
    "encoder": _encoder,
    "decoder": _decoder,
    "memory": _memory,
    "power": _power,
    "energy": _energy,
    "temperature": _temperature,
    "memory_temperature": _memory_temperature,
    "sm_clock": _sm_clock,
    "mem_clock": _mem_clock,
    "clocks_event_reasons": _clocks_event_reasons,
    "pcie_replay": _pcie_replay,
    "ecc_sbe": _ecc_sbe,
    "ecc_dbe": _ecc_dbe,
    "pstate": _pstate,
    "power_limit": _power_limit,
}
