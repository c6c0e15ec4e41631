"""The HBM detector (collector/detect/hbm.py): HBM temperature against what the GPU's own die
temperature and memory traffic put it at."""

from __future__ import annotations

import math

from collector.detect import Anomaly
from telemetry.records import GpuRecord
from tests.detect.helpers import T0, record, run, trace


def _replica(hot: tuple[float, float, float] | None = None, seconds: int = 5400) -> list[Anomaly]:
    """A serving replica whose load follows its demand over the day (20-min waves and bursts): its
    die and HBM heat with it, HBM by its DRAM traffic too (a memory-bound burst heats the stacks
    more than the die). ``hot``: (start, seconds, °C) the HBM runs hotter at the same load."""
    def make(t: float, g: int) -> GpuRecord:
        load = 0.45 + 0.35 * math.sin(2 * math.pi * t / 1200.0) + (0.15 if int(t) % 300 < 40 else 0.0)
        dram = 0.2 + 0.6 * load * (1.0 if int(t) % 900 < 450 else 0.4)  # prefill-heavy, then decode-heavy
        die = 38.0 + 30.0 * load + 0.5 * math.sin(t / 7.0)
        mem = die - 4.0 + 14.0 * dram
        if hot is not None and hot[0] <= t < hot[0] + hot[1]:
            mem += hot[2] * min(1.0, (t - hot[0]) / 120.0)
        return record(t, g, sm=load, temp=round(die), pid=200, pod="serve-0", service="chat", DEV_GPU_UTIL=100 * load,
                      DEV_MEMORY_TEMP=round(mem), PROF_DRAM_ACTIVE=dram)
    return run(trace(seconds, 1, make))


def test_a_replicas_hbm_following_its_load_and_traffic_is_quiet() -> None:
    """HBM minus die moves by 10 °C as the replica's load and mix move: no finding."""
    assert [a for a in _replica() if a.kind == "metric_anomaly"] == []


def test_a_replicas_hbm_running_hot_at_the_same_load_is_found_within_three_minutes() -> None:
    """The stacks' cooling fails on a replica whose load never sits still, which the general detector
    (judging only steady workloads at their plateau) could not look at: 12 °C hotter, reached over
    two minutes, for 20 minutes."""
    found = [a for a in _replica((3000, 1200, 12.0)) if a.kind == "metric_anomaly"]
    assert len(found) == 1 and found[0].metric == "DCGM_FI_DEV_MEMORY_TEMP"
    assert 3000 < found[0].start - T0 <= 3000 + 180
    assert "hotter than its die and memory traffic explain" in found[0].summary
    assert found[0].end is not None and found[0].end - T0 >= 4200


def test_a_fit_begun_in_an_unusual_phase_does_not_alarm_once_the_gpu_settles() -> None:
    """The agent starts while a job starts: the die is 15 °C above its HBM for the first minutes
    (the die heats faster), then both settle. A fit trusted after its first two minutes put HBM 15 °C
    too low and called every later sample hot."""
    def make(t: float, g: int) -> GpuRecord:
        die = 70.0 if t >= 300 else 40.0 + 0.1 * t
        mem = 72.0 if t >= 300 else 30.0 + 0.05 * t
        return record(t, g, temp=die, pid=100, pod="", DEV_MEMORY_TEMP=mem, PROF_DRAM_ACTIVE=0.3)
    assert [a for a in run(trace(3000, 1, make)) if a.kind == "metric_anomaly"] == []


def _thermal(phases: list[tuple[float, float]], seconds: int, hot_at: float | None = None, mem_tau: float = 75.0,
             phase_s: list[int] | None = None, gap: range = range(0), blind: range = range(0),
             die_fault: range = range(0)) -> list[Anomaly]:
    """A GPU whose die and HBM follow its power and traffic with their own time constants (the die
    30 s, the HBM ``mem_tau``: the stacks lag behind), through ``phases`` of (SM activity, DRAM
    activity) of ten minutes each (or ``phase_s``'s seconds each, in turn); from ``hot_at`` its HBM
    runs 12 °C hotter. No record in the seconds ``gap``; no DRAM activity in those of ``blind``. In
    those of ``die_fault`` the die's cooling fails (2.6 times the °C per watt): above 86 °C the driver
    holds its clocks (SW thermal slowdown), and its power, to 400 W."""
    die, mem = 30.0, 29.0
    recs = []
    lengths = phase_s or [600] * len(phases)
    cycle = sum(lengths)
    for s in range(seconds):
        at, i = s % cycle, 0
        while at >= lengths[i]:
            at -= lengths[i]
            i += 1
        sm, dram = phases[i]
        power, reasons, r = 70.0 + 620.0 * sm, 0, 0.05
        if s in die_fault:
            r *= 2.6
            if die > 86.0 and sm > 0:
                power, reasons = min(power, 400.0), 0x20
        die += (30.0 + r * power - die) / 30.0
        extra = 12.0 if hot_at is not None and s >= hot_at else 0.0
        mem += (27.0 + 0.04 * power + 14.0 * dram + extra - mem) / mem_tau
        if s in gap:
            continue
        traffic = {} if s in blind else {"PROF_DRAM_ACTIVE": dram}
        recs.append(record(float(s), 0, sm=sm, temp=round(die), pid=100, pod="", DEV_GPU_UTIL=100 * sm,
                           DEV_MEMORY_TEMP=round(mem), DEV_CLOCKS_EVENT_REASONS=reasons, **traffic))
    return [a for a in run(recs) if a.kind == "metric_anomaly"]


def test_hbm_lagging_its_die_as_the_load_moves_is_quiet_and_hbm_running_hot_is_not() -> None:
    """Each time the load falls, the die cools in half a minute and the HBM in over a minute: judged
    against the die of the moment, the HBM read 8-9 °C hot after every fall (108 false findings on
    an independently written fleet, whose stacks lag like this). The minute's change of the die and
    the traffic carries the lag."""
    phases = [(0.9, 0.5), (0.2, 0.1), (0.7, 0.3), (0.05, 0.02)]
    assert _thermal(phases, 7200) == []
    found = _thermal(phases, 7200, hot_at=5400)
    assert len(found) == 1 and 5400 < found[0].start - T0 <= 5400 + 400


def test_a_load_the_fit_never_learned_from_is_learned_not_judged() -> None:
    """Idle for 20 minutes, a light batch (DRAM activity 0.25), then a memory-bound one (0.87): the
    fit's DRAM slope, learned between 0 and 0.25, put the HBM 8 °C low at 0.87. A load outside what
    the fit learned from is learned, and judged once seen."""
    phases = [(0.0, 0.0), (0.0, 0.0), (0.8, 0.25), (0.95, 0.87), (0.95, 0.87), (0.8, 0.25)]
    assert _thermal(phases, 3600) == []


def test_a_new_load_whose_hbm_settles_slowly_is_learned_until_the_fit_follows_it() -> None:
    """An independently written fleet's false findings (16 of 22 on four sets of traces): a batch job
    at DRAM activity 0.84 after an idle hour, its stacks settling over minutes (time constant 150 s).
    The fit learned the new load for five minutes, while the HBM still climbed, was left 3 °C low,
    learned nothing more (a sample that far above it is an excursion) and called the job's steady HBM
    8-12 °C hot. It now learns until it follows the GPU again; a cooling fault later is still found."""
    phases = [(0.0, 0.0), (0.93, 0.84)]
    assert _thermal(phases, 7200, mem_tau=150.0, phase_s=[3600, 3600]) == []
    found = _thermal(phases, 9000, mem_tau=150.0, phase_s=[3600, 5400], hot_at=6600)
    assert len(found) == 1 and 6600 < found[0].start - T0 <= 6600 + 600


def test_hbm_that_lags_by_minutes_after_short_pauses_and_a_jobs_end_is_quiet() -> None:
    """The same fleet's other false findings: a job whose 60-s pauses cool its die by 20 °C and its
    HBM by less, and a GPU idle after its job ended, its die cold within a minute and its HBM still
    warm for three. The lag is the load's distance from its recent past, at the HBM's time
    constant, not the die's change over the last minute."""
    phases = [(0.93, 0.84), (0.05, 0.02), (0.93, 0.84), (0.0, 0.0)]
    assert _thermal(phases, 10800, mem_tau=120.0, phase_s=[1500, 60, 1500, 1200]) == []


def test_a_sample_without_dram_activity_is_no_sample_without_traffic() -> None:
    """The agent reads DRAM activity (profiling) less often than temperatures, and the first samples
    after a gap may come without it. Read as zero traffic, a memory-bound job's HBM was 10 °C "hot"
    for the minute after an 87-s gap (an independently written fleet). The last reading stands."""
    phases = [(0.93, 0.84), (0.93, 0.3), (0.6, 0.84), (0.0, 0.0)]  # (the traffic moves on its own)
    assert _thermal(phases, 5400, gap=range(2400, 2700), blind=range(2700, 2760)) == []
    assert _thermal(phases, 5400, blind=range(2400, 3000, 7)) == []  # (one sample in seven without it)


def test_a_gpu_whose_dram_activity_stops_coming_is_judged_again_without_it() -> None:
    """Profiling turned off for good (DCGM restarted without it): the samples without DRAM activity are
    not judged for half an hour, and then the GPU is one without the reading. Its fit starts again
    from its die alone, stays quiet, and a cooling fault later is found."""
    phases = [(0.93, 0.5), (0.6, 0.3)]
    assert _thermal(phases, 9000, blind=range(1800, 9000)) == []
    found = _thermal(phases, 12600, blind=range(1800, 12600), hot_at=9000)
    assert len(found) == 1 and 9000 < found[0].start - T0 <= 9000 + 600


def test_a_die_cooling_fault_teaches_the_hbm_fit_nothing() -> None:
    """The die's coolant flow fails for 20 minutes: its die runs 2.6 times hotter per watt, the driver
    holds it at its limit at lower power, and the GPU idles between (its die hot, nothing flagged).
    Learned, such faults taught an independently written fleet's fits that memory traffic cools HBM,
    and the healthy work after them was "8-20 °C hot" for an hour (23 false findings on four sets of
    traces, on eleven GPUs with such a fault). The fit goes back to before the fault and learns nothing
    for a quarter of an hour after the die was last held; an HBM cooling fault after it is found."""
    phases, lengths = [(0.85, 0.28), (0.95, 0.85), (0.0, 0.0)], [900, 300, 300]
    assert _thermal(phases, 10800, phase_s=lengths, die_fault=range(3600, 5400)) == []
    found = _thermal(phases, 10800, phase_s=lengths, die_fault=range(3600, 5400), hot_at=7200)
    assert len(found) == 1 and 7200 < found[0].start - T0 <= 7200 + 300
