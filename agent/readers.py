"""Readers: one per catalog ``source``, each one driver call turned into DCGM-unit metrics.

The catalog names a source for every metric; this table is its other half. A test
checks that every polled source in the catalog has a reader here and that the readers
write exactly the catalog's keys for their source. The key names and the scale from the
driver's unit to DCGM's come from the catalog row (``nvml_divisor``); a reader only knows
which driver call yields which key. GPM and XID metrics have no reader here: they come
from :mod:`agent.gpm` and the XID event thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from agent.driver.base import Driver, Handle
from telemetry.catalog import BY_KEY
from telemetry.keys import (
    CLOCKS_EVENT_REASONS,
    DEC_UTIL,
    ECC_DBE_VOL_TOTAL,
    ECC_SBE_VOL_TOTAL,
    ENC_UTIL,
    FB_FREE,
    FB_RESERVED,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    MEM_CLOCK,
    MEM_COPY_UTIL,
    MEMORY_TEMP,
    PCIE_REPLAY_COUNTER,
    POWER_MGMT_LIMIT,
    POWER_USAGE,
    PSTATE,
    SM_CLOCK,
    TOTAL_ENERGY_CONSUMPTION,
)

Metrics = dict[str, float]
Reader = Callable[[Driver, Handle, Metrics], None]

# divisors looked up once, not per sample (the readers run on the sampling hot path)
_FB_USED: Final = BY_KEY[FB_USED].nvml_divisor
_FB_FREE: Final = BY_KEY[FB_FREE].nvml_divisor
_FB_RESERVED: Final = BY_KEY[FB_RESERVED].nvml_divisor
_POWER: Final = BY_KEY[POWER_USAGE].nvml_divisor
_LIMIT: Final = BY_KEY[POWER_MGMT_LIMIT].nvml_divisor


def _utilization(d: Driver, h: Handle, out: Metrics) -> None:
    gpu, mem = d.utilization(h)
    out[GPU_UTIL] = gpu
    out[MEM_COPY_UTIL] = mem


def _encoder(d: Driver, h: Handle, out: Metrics) -> None:
    out[ENC_UTIL] = d.encoder_utilization(h)


def _decoder(d: Driver, h: Handle, out: Metrics) -> None:
    out[DEC_UTIL] = d.decoder_utilization(h)


def _memory(d: Driver, h: Handle, out: Metrics) -> None:
    used, free, reserved = d.memory(h)
    # rounded up to whole MiB: that is what nvidia-smi shows (checked on the H200: truncating
    # read 1 MiB low on all three, rounding to nearest still 1 MiB low on free and reserved)
    out[FB_USED] = math.ceil(used / _FB_USED)
    out[FB_FREE] = math.ceil(free / _FB_FREE)
    out[FB_RESERVED] = math.ceil(reserved / _FB_RESERVED)


def _power(d: Driver, h: Handle, out: Metrics) -> None:
    out[POWER_USAGE] = d.power(h) / _POWER


def _energy(d: Driver, h: Handle, out: Metrics) -> None:
    out[TOTAL_ENERGY_CONSUMPTION] = d.energy(h)


def _temperature(d: Driver, h: Handle, out: Metrics) -> None:
    out[GPU_TEMP] = d.temperature(h)


def _memory_temperature(d: Driver, h: Handle, out: Metrics) -> None:
    out[MEMORY_TEMP] = d.memory_temperature(h)


def _sm_clock(d: Driver, h: Handle, out: Metrics) -> None:
    out[SM_CLOCK] = d.sm_clock(h)


def _mem_clock(d: Driver, h: Handle, out: Metrics) -> None:
    out[MEM_CLOCK] = d.mem_clock(h)


def _clocks_event_reasons(d: Driver, h: Handle, out: Metrics) -> None:
    out[CLOCKS_EVENT_REASONS] = d.clocks_event_reasons(h)


def _pcie_replay(d: Driver, h: Handle, out: Metrics) -> None:
    out[PCIE_REPLAY_COUNTER] = d.pcie_replay(h)


def _ecc_sbe(d: Driver, h: Handle, out: Metrics) -> None:
    out[ECC_SBE_VOL_TOTAL] = d.ecc_volatile(h, uncorrected=False)


def _ecc_dbe(d: Driver, h: Handle, out: Metrics) -> None:
    out[ECC_DBE_VOL_TOTAL] = d.ecc_volatile(h, uncorrected=True)


def _pstate(d: Driver, h: Handle, out: Metrics) -> None:
    out[PSTATE] = d.pstate(h)


def _power_limit(d: Driver, h: Handle, out: Metrics) -> None:
    out[POWER_MGMT_LIMIT] = d.power_limit(h) / _LIMIT


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
