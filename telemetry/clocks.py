"""NVML's clock-event reasons: one flag type with each bit's name, meaning and whether it throttles.

Why here: ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` is the bitmask of
``nvmlDeviceGetCurrentClocksEventReasons``, and the agent (throttle events), the detectors
(thermal and power throttling), the API and the web page (reason names) all read it. They
used to spell the bits in four tables that disagreed: the agent counted SYNC_BOOST as a
throttle, the detectors' name table lacked it (and APPLICATIONS_CLOCKS_SETTING and
DISPLAY_CLOCK_SETTING), and the API's old health table named only four slowdown bits. This
is the one table now; every other module imports it.

The bits and names are NVML's (``nvmlClocksEventReason*``, formerly
``nvmlClocksThrottleReason*``; the values did not change with the rename). Which bits
*throttle* follows NVML's own split: idle, application clocks and display clocks are the
GPU doing what it was told (an idle H200 reads 0x1, GPU-FACTS.md); the rest hold clocks
below what the load asks for. Sync boost is a throttle: the GPU is held to the clock of the
slowest GPU in its sync-boost group, which is what the agent's ``throttle_start`` event
always reported.
"""

from __future__ import annotations

import enum
from typing import Final


class ClockEventReason(enum.IntFlag):
    """One bit of NVML's clock-event-reason mask; members combine like the mask itself."""

    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL = 0x20
    HW_THERMAL = 0x40
    HW_POWER_BRAKE = 0x80
    DISPLAY_CLOCK_SETTING = 0x100

    @property
    def meaning(self) -> str:
        """What the bit says, in an operator's words (for one bit; combined flags join theirs)."""
        return "; ".join(_MEANING[r] for r in members(self))

    @property
    def throttles(self) -> bool:
        """Whether any of these bits holds the clocks below what the load asks for."""
        return bool(int(self) & THROTTLES)


_MEANING: Final[dict[ClockEventReason, str]] = {
    ClockEventReason.GPU_IDLE: "nothing is running: clocks are low because the GPU is idle",
    ClockEventReason.APPLICATIONS_CLOCKS_SETTING: "clocks are held at the application clocks set by nvidia-smi -ac",
    ClockEventReason.SW_POWER_CAP: "the power limit caps the clocks (software power capping)",
    ClockEventReason.HW_SLOWDOWN: "hardware slowdown: power brake, thermal or power-supply protection halved "
                                  "the clocks or more",
    ClockEventReason.SYNC_BOOST: "held to the clock of the slowest GPU in its sync-boost group",
    ClockEventReason.SW_THERMAL: "the driver lowers the clocks to keep the GPU or its memory under their "
                                 "maximum temperature",
    ClockEventReason.HW_THERMAL: "the hardware lowers the clocks because the GPU is too hot",
    ClockEventReason.HW_POWER_BRAKE: "an external power-brake signal (the system's power supply or BMC) "
                                     "slows the GPU",
    ClockEventReason.DISPLAY_CLOCK_SETTING: "clocks are held by the display clock setting",
}

# The groups below are plain ints: code that tests a mask on every sample uses them (an
# ``int & IntFlag`` goes through the enum machinery, about 50 times slower than ints).
#: The bits that slow a GPU down (all but idle, application clocks and display clocks).
THROTTLES: Final = int(
    ClockEventReason.SW_POWER_CAP | ClockEventReason.HW_SLOWDOWN | ClockEventReason.SYNC_BOOST
    | ClockEventReason.SW_THERMAL | ClockEventReason.HW_THERMAL | ClockEventReason.HW_POWER_BRAKE
)
#: Heat: never normal, so the thermal detector fires on these bits alone.
THERMAL: Final = int(ClockEventReason.SW_THERMAL | ClockEventReason.HW_THERMAL)
#: Power: a cap that may be normal at full rated power, and a hardware slowdown that never is.
POWER: Final = int(ClockEventReason.SW_POWER_CAP | ClockEventReason.HW_SLOWDOWN)
#: The power brake: an external signal that drops the clocks (the power detector's, critical).
BRAKE: Final = int(ClockEventReason.HW_POWER_BRAKE)


def members(mask: int) -> list[ClockEventReason]:
    """The known single bits set in ``mask``, lowest first (unknown bits are left out)."""
    return [r for r in ClockEventReason if mask & int(r)]


def names(mask: int) -> str:
    """``"SW_THERMAL|HW_THERMAL"`` for a mask; ``"none"`` when no known bit is set."""
    return "|".join(str(r.name) for r in members(mask)) or "none"
