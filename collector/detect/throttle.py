"""Clock throttling by heat and by power, from clock-event reasons, clocks and temperature.

Why both the reason bits and the baseline: a GPU at its power cap under a heavy matmul
reports SW_POWER_CAP all the time (GPU-FACTS.md: 692 W of 700 W) and that is normal;
what matters is the SM clock falling well below what this GPU normally holds when busy.
At its full rated power, that is the clock it holds *at the cap* (a second baseline): a
GPU that reaches the cap because its load rose (a serving replica taking more traffic)
is capped as designed, not throttled. "Used to" is this job's: a heavier job draws more per
MHz and holds a lower clock at the same watts, so the clock held at the cap is learned afresh
for each workload (engine.py). Within one job, too, the kernel mix sets the clock at the cap:
a tensor-heavy phase of a batch job held 1,485 MHz where its memory-bound phase held 1,870
(an independently written fleet: 8 false throttles, each at 590-598 W of 600). So at full
power a clock below the job's usual one is a fault only when no change of mix explains it:
below ``MIX_SPAN`` of it (the heaviest kernels seen, a bf16 matmul, held 75% of the boost
clock at the cap: GPU-FACTS.md), or with the die ``HOTTER_C`` hotter than it ran at the cap
(the same watts, a hotter die: cooling lost, and hot silicon leaks, so each MHz costs more).
Below its rated power, a cap means a lowered limit or a cap that bites below the limit (a
power-delivery or BMC cap). HW slowdown counts whatever the power.
Thermal reasons (SW/HW thermal) are never normal, and HW power brake is an external
signal that slows the GPU to a crawl, so those fire on the bit alone.
"""

from __future__ import annotations

import math

from collector.detect.anomaly import Severity
from collector.detect.finding import DetectorConfig, Finding
from collector.detect.level import IDLE
from collector.detect.state import GpuState
from telemetry.clocks import BRAKE, POWER, THERMAL, ClockEventReason, names
from telemetry.keys import GPU_TEMP, SM_CLOCK

# single bits as plain ints (tested on every record)
_HW_THERMAL = int(ClockEventReason.HW_THERMAL)
_HW_SLOWDOWN = int(ClockEventReason.HW_SLOWDOWN)
HOT_C = 87.0  # at or above this temperature a clock well below its baseline is thermal (no reason bit needed)
AT_LIMIT = 0.9  # power within 10% of the highest limit this GPU had: at its cap, not held below it
MIX_SPAN = 0.7  # at the cap, a clock below this share of the job's usual one: more than a change of mix
HOTTER_C = 5.0  # at the cap, the die this much hotter than it ran there: the cooling, not the mix


def _clock_cause(st: GpuState) -> str | None:
    if st.clock is None or st.clock_base.count < 30:
        return None
    base = st.clock_base.level
    return f"SM clock {st.clock:.0f} MHz vs baseline {base:.0f} MHz ({(st.clock / base - 1) * 100:+.0f}%)"


def thermal(st: GpuState, cfg: DetectorConfig) -> Finding | None:
    hot_fallback = (
        st.temp is not None and st.temp >= HOT_C and st.clock is not None and st.clock_base.count >= 30
        and st.clock < cfg.clock_drop_ratio * st.clock_base.level
    )
    if not (st.reasons & THERMAL) and not hot_fallback:
        return None
    causes = [f"clock event reason {names(st.reasons & THERMAL)}"] if st.reasons & THERMAL else []
    if st.temp is not None:
        base = st.temp_base.level if st.temp_base.count else st.temp
        causes.append(f"temperature {st.temp:.0f} °C vs baseline {base:.0f} °C")
    clock = _clock_cause(st)
    if clock:
        causes.append(clock)
    severity: Severity = "critical" if (st.reasons & _HW_THERMAL and (st.temp or 0) >= 90) else "warning"
    summary = f"{st.where()} thermally throttled" + (f" at {st.temp:.0f} °C" if st.temp is not None else "")
    return Finding("thermal_throttle", severity, GPU_TEMP, summary, causes, cfg.throttle_hold_s)


def at_limit(st: GpuState, power_w: float | None, limit_w: float | None) -> bool:
    """Drawing (about) the full rated power: the highest limit this GPU has had."""
    return power_w is not None and st.limit_max > 0 and power_w >= AT_LIMIT * st.limit_max \
        and (limit_w is None or limit_w >= AT_LIMIT * st.limit_max)


def _cap_fault(st: GpuState, clock: float, cfg: DetectorConfig) -> bool:
    """At full rated power: a clock that neither the cap at this job's usual mix nor a change of mix explains."""
    cap = st.cap_clock_base
    if cap.count < 30 or clock >= cfg.clock_drop_ratio * cap.level:
        return False
    if clock < MIX_SPAN * cap.level:
        return True
    return _hotter_at_cap(st)


def _hotter_at_cap(st: GpuState) -> bool:
    return st.temp is not None and st.cap_temp_base.count >= 30 and st.temp >= st.cap_temp_base.level + HOTTER_C


def power(st: GpuState, cfg: DetectorConfig, power_w: float | None, limit_w: float | None) -> Finding | None:
    if limit_w is not None and limit_w > st.limit_max:
        st.limit_max = limit_w
    brake = bool(st.reasons & BRAKE)
    clock = st.clock if st.clock is not None else math.inf
    capped = bool(st.reasons & POWER) and st.clock_base.count >= 30 \
        and clock < cfg.clock_drop_ratio * st.clock_base.level and (st.sm or 0.0) >= IDLE
    if capped and not st.reasons & _HW_SLOWDOWN and at_limit(st, power_w, limit_w):
        capped = _cap_fault(st, clock, cfg)  # else: drawing its full rated power, the cap doing its job
    if not (brake or capped):
        return None
    causes = [f"clock event reason {names(st.reasons & (POWER | BRAKE))}"]
    clock_cause = _clock_cause(st)
    if clock_cause:
        causes.append(clock_cause)
    if power_w is not None:
        causes.append(f"power {power_w:.0f} W" + (f" of a {limit_w:.0f} W limit" if limit_w else ""))
    if _hotter_at_cap(st) and at_limit(st, power_w, limit_w):
        causes.append(f"temperature {st.temp:.0f} °C at the cap vs {st.cap_temp_base.level:.0f} °C: the same watts "
                      f"on a hotter die (check its cooling)")
    summary = f"{st.where()} clocks held down by power" + (" brake" if brake else " capping")
    return Finding("power_throttle", "critical" if brake else "warning", SM_CLOCK, summary, causes,
                   cfg.throttle_hold_s)
