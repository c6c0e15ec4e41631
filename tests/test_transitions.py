"""Throttling and ECC transitions become events: debounced starts and ends, ECC increments."""

from __future__ import annotations

from agent.transitions import GpuTransitions
from telemetry.keys import CLOCKS_EVENT_REASONS as REASONS_KEY
from telemetry.keys import ECC_DBE_VOL_TOTAL as DBE_KEY
from telemetry.keys import ECC_SBE_VOL_TOTAL as SBE_KEY


def _feed(tr: GpuTransitions, masks: list[int], start: float = 100.0) -> list[tuple[float, str, int | None]]:
    out = []
    for i, mask in enumerate(masks):
        out += [(e.ts, e.kind, e.code) for e in tr.update(start + i, {REASONS_KEY: mask})]
    return out


def test_a_power_cap_that_holds_starts_and_ends_once_at_its_true_times() -> None:
    tr = GpuTransitions("node-a", "GPU-a", hold=5.0)
    events = _feed(tr, [0] * 3 + [0x4] * 10 + [0] * 10)
    assert events == [(103.0, "throttle_start", 0x4), (113.0, "throttle_end", 0x4)]


def test_flapping_under_the_hold_time_makes_no_event() -> None:
    tr = GpuTransitions("node-a", "GPU-a", hold=5.0)
    assert _feed(tr, [0x4, 0, 0x4, 0, 0x4, 0, 0x4, 0, 0, 0, 0, 0, 0]) == []


def test_idle_and_application_clock_bits_are_not_throttling() -> None:
    tr = GpuTransitions("node-a", "GPU-a", hold=0.0)
    assert _feed(tr, [0x1, 0x2, 0x100, 0x1]) == []


def test_two_reasons_are_tracked_apart() -> None:
    tr = GpuTransitions("node-a", "GPU-a", hold=2.0)
    events = _feed(tr, [0x40 | 0x20] * 3 + [0x20] * 3 + [0] * 3)
    assert events == [(100.0, "throttle_start", 0x20), (100.0, "throttle_start", 0x40),
                      (103.0, "throttle_end", 0x40), (106.0, "throttle_end", 0x20)]


def test_ecc_increments_are_events_with_the_count() -> None:
    tr = GpuTransitions("node-a", "GPU-a")
    assert tr.update(1.0, {DBE_KEY: 0, SBE_KEY: 7}) == []  # the first sample is the baseline
    events = tr.update(2.0, {DBE_KEY: 2, SBE_KEY: 7})
    assert [(e.kind, e.code) for e in events] == [("ecc_dbe", 2)]
    assert "2 new uncorrectable" in events[0].detail
    assert [(e.kind, e.code) for e in tr.update(3.0, {DBE_KEY: 2, SBE_KEY: 9})] == [("ecc_sbe", 2)]
    assert tr.update(4.0, {}) == []  # a sample without the counters changes nothing
