"""Health limits NVIDIA publishes for a GPU's error counters: one place, for every detector.

Why a module of its own: a limit is a fact about the hardware (what the driver team calls
too many), not a tuning choice of a detector, and the agent's exposition and the collector's
detectors must agree on it.
"""

from __future__ import annotations

from typing import Final

# PCIe replays a minute above which a link is unhealthy: "8 replays per minute is the maximum
# recommended by RM" (NVIDIA DCGM, dcgmlib/src/DcgmGpuHardwareLimits.h, DCGM_LIMIT_MAX_PCIREPLAY_RATE,
# what `dcgmi health` checks). A sound link replays a few times a day.
MAX_PCIE_REPLAYS_PER_MIN: Final = 8

__all__ = ["MAX_PCIE_REPLAYS_PER_MIN"]
