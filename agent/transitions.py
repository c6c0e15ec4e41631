"""Events derived from a GPU's samples: throttling starts and ends, and ECC error increments.

Why: XIDs arrive from NVML as events, but throttling and ECC errors show up only as a
bitmask and counters in the samples. An operator looking at ``events`` for "when did
this GPU start throttling" should not have to diff samples, so the agent turns the
transitions into :class:`EventRecord` items next to XIDs. Which clock-event reasons are
throttling, and their names, come from :mod:`telemetry.clocks`.

A throttle reason is debounced: it must hold for ``hold`` seconds of samples before a
``throttle_start`` is emitted, and be gone as long before ``throttle_end``. A GPU at its
power cap flips the SW power-cap bit every few hundred milliseconds, and one event per
flip would bury the events table. The start event carries the time the reason was first
seen, not the time it was confirmed. ECC counters are volatile totals: any increase is an
``ecc_dbe`` (uncorrectable) or ``ecc_sbe`` (corrected) event whose code is the number of
new errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from telemetry.clocks import THROTTLES, members
from telemetry.keys import CLOCKS_EVENT_REASONS, ECC_DBE_VOL_TOTAL, ECC_SBE_VOL_TOTAL
from telemetry.records import EventRecord

#: (bit, name) of each throttling reason, as plain ints: this runs on every sample
_THROTTLE_BITS: Final = tuple((int(r), str(r.name)) for r in members(THROTTLES))
_INT32_MAX: Final = 2**31 - 1
_ECC: Final = ((ECC_DBE_VOL_TOTAL, "ecc_dbe", "uncorrectable"), (ECC_SBE_VOL_TOTAL, "ecc_sbe", "corrected"))


@dataclass(slots=True)
class _Reason:
    active: bool = False  # the state last reported (start emitted, end not yet)
    seen: bool = False  # the state of the last sample
    since: float = 0.0  # when the last sample's state began


@dataclass(slots=True)
class GpuTransitions:
    """One GPU's transition state; :meth:`update` returns the events a new sample makes."""

    node: str
    gpu: str
    hold: float = 5.0
    _reasons: dict[int, _Reason] = field(default_factory=dict)
    _ecc: dict[str, int] = field(default_factory=dict)

    def update(self, ts: float, metrics: Mapping[str, float]) -> list[EventRecord]:
        events: list[EventRecord] = []
        mask = metrics.get(CLOCKS_EVENT_REASONS)
        if isinstance(mask, int) and not isinstance(mask, bool):
            for bit, name in _THROTTLE_BITS:
                events += self._reason(bit, name, bool(mask & bit), ts)
        for key, kind, label in _ECC:
            value = metrics.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            last = self._ecc.get(key)
            self._ecc[key] = value
            if last is not None and value > last:
                new = value - last
                events.append(EventRecord(ts, self.node, self.gpu, kind, min(new, _INT32_MAX),
                                          f"{new} new {label} ECC error(s): volatile total {last} -> {value}"))
        return events

    def _reason(self, bit: int, name: str, present: bool, ts: float) -> list[EventRecord]:
        r = self._reasons.get(bit)
        if r is None:
            if not present:
                return []
            r = self._reasons[bit] = _Reason(False, True, ts)
        if present != r.seen:
            r.seen, r.since = present, ts
        if present != r.active and ts - r.since >= self.hold:
            r.active = present
            kind = "throttle_start" if present else "throttle_end"
            verb = "began" if present else "ended"
            return [EventRecord(r.since, self.node, self.gpu, kind, bit, f"clock event reason {name} {verb}")]
        return []
