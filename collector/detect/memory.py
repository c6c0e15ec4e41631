"""Memory leak: framebuffer use growing steadily under the same process, with time to OOM.

Why a regression over a window and not a threshold: a job filling its memory at start,
a cache warming up, or an allocator grabbing a block are steps and ramps that stop; a
leak is growth that keeps going at a steady rate. The detector fits a line to the used
memory of the last minute (and of the last five minutes), asks for a good fit, growth in
every quarter of the window, and enough of it, and projects when the GPU runs out.
Samples before the current process set started, and from its first ``STARTUP_S`` seconds
(loading a model's weights grows memory steadily for a minute or more), are never used,
so job starts do not count.

Why the GPU's work is asked too (``_allocating``): a job allocates for work it starts, long
after its process started (a training job's first steps allocate activations and optimizer
state once loading and compiling are done, minutes in; a notebook loads a model when its user
runs a cell). That grows as fast and as straight as a leak for half a minute. A leak grows
under work that was already running. So the half-minute and one-minute windows do not judge
growth that began within ``COINCIDE_S`` of the work itself (the GPU idle, SM activity below
``WORKING``, until then), nor growth with no work under it (median SM activity below ``WORKING``:
a load into an idle process). Work that only ran slower before (a job whose stall ended as its
leak began: the real H200 trace the issue was filed on) was already running. The five-minute
window judges growth whatever the work does, so long as there is some: growth that goes on for minutes
is no first step, but growth with no kernel under most of it is a load (a model read from slow storage
for minutes, a finished job's process lingering: an independently written fleet's lingering fine-tune
"leaked" 2 GiB in five idle minutes).

Why a young job waits (``CYCLE_S``): in a job's first ten minutes of work memory grows for
reasons a leak does not have: the caching allocator meets new tensor shapes, a cache grows its
first tooth before it is ever freed, the first evaluation allocates its own. Growth that would
leave more than ``CRITICAL_TTO_S`` before the GPU runs out is judged once the work has had ten
minutes (not the process: loading and compiling come first), when a cache has shown whether it
frees; sooner than that, at once. On an independently written fleet 53 of 66 false leaks came in
processes' first ten minutes, and no true one did (docs/benchmarks.md, rounds 22 and 23).

Why a job whose memory cycles is judged by its floor (``_cycle_edge``, ``_floor``): a cache grown and
emptied every few minutes climbs along a line between releases, and a change of work that kept buffers
lifts every tooth after it, even when the release hides the step. Its edges are no leak while what it
falls back to stays put; a leak under the cycle lifts that floor, tooth after tooth, where no line through
the raw points fits. And why steps on a clock are one (``_stairs``): a leak of 0.5-1 GiB every few minutes
leaves three steps in twenty minutes, which no line fits well.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import GpuState
from telemetry.keys import FB_USED

EVERY = 5.0  # seconds between kept samples
STARTUP_S = 120.0  # a process's first minutes: loading weights and allocating caches, not leaking
# a leak that would run the GPU out of memory within URGENT_TTO_S is judged on URGENT_S of growth,
# not a minute: waiting costs the job (the real H200 trace g's 0.5 GiB/s leak would OOM in about
# 3 min) and a leak shows its line within half a minute; asked for a better fit (R² 0.95). Until
# 2026-12-05 the bound was 10 min; at 30 min (with twice the growth asked) the generated suites' leak
# median went from 44-48 s to 29-41 s; at 2 h with the same growth as a minute's (512 MiB), to 25-28 s,
# with no other anomaly changed either time (docs/benchmarks.md, rounds 15 and 18). What it costs: a
# ramp of 30 s or more after a process's start-up (weights or an adapter loaded into a running
# server) at 512 MiB per 30 s or more, that would fill the GPU within two hours if it went on, is
# reported once it has gone on for 30 s; a ramp that stops sooner (the test of a short ramp) is not
URGENT_S = 30.0
CYCLE_S = 600.0  # memory freed and grown back within this long is a cycle of the job's, not a leak
# the longest window: the whole kept history (240 points, one every EVERY s). A leak that grows in steps
# (512 MiB every two minutes: an allocation per request batch never freed) fits no line in five minutes
# and leaves quarters of it flat; over twenty minutes each quarter holds steps and the line fits. An
# allocator meeting longer inputs grows in steps too, but ever more rarely: its last quarter is flat
LONG_S = 1200.0
COINCIDE_S = 5.0  # growth that began within this of the work under it is allocation for that work
# ... and growth that began within this of the process's first work (its first steps: activations and
# optimizer state, up to tens of GiB over half a minute while the steps ramp up; a compiling job's trial
# kernels before them make the GPU not idle, so COINCIDE_S alone missed it: an independently written
# fleet's fine-tunes, 14 GiB in 25 s, "out of memory in about 4 min")
FIRST_WORK_S = 60.0
WORKING = 0.05  # median SM activity below this: no work under the growth (a load, an idle notebook)
_WORK_POINTS = 6  # kept points (half a minute) whose median says whether work ran
_IDLE_POINTS = 2  # ... of which this many may read less: most of them must read work
# a step of memory (this many MiB between two kept points, STEP_PACE times the growth per point after
# it) at a change of the work's SM activity (by WORK_CHANGED of the higher): allocation for that work
STEP_MIB = 256.0
STEP_PACE = 4.0
WORK_CHANGED = 0.3
# a memory cycle (a cache grown and emptied every few minutes): growth up to EDGE_PACE times the pace of its
# teeth is its own rising edge; it counts as cycling until no release came for CYCLES times its longest tooth;
# its floor is judged on FLOORS troughs or more. Steps on a clock: gaps and sizes within REGULAR of each other
EDGE_PACE = 1.5
CYCLES = 2.0
FLOORS = 5
REGULAR = 1.5
URGENT_TTO_S = 7200.0
CRITICAL_TTO_S = 1800.0  # out of memory sooner than this: a critical finding, not a warning


def _fit(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares slope (MiB/s) and R² of used memory over time."""
    n = len(points)
    t0 = points[0][0]
    sx = sy = sxx = sxy = syy = 0.0
    for t, y, _ in points:
        x = t - t0
        sx += x
        sy += y
        sxx += x * x
        sxy += x * y
        syy += y * y
    vx = sxx - sx * sx / n
    vy = syy - sy * sy / n
    if vx <= 0 or vy <= 0:
        return 0.0, 0.0
    cov = sxy - sx * sy / n
    return cov / vx, cov * cov / (vx * vy)


def _window(st: GpuState, ts: float, span: float) -> list[tuple[float, float, float]]:
    """The kept samples since ``span`` ago (and since the start-up), oldest first: read from the
    newest end, since the history is in time order and a short window is a few of its 240."""
    start = max(ts - span, st.pids_since + STARTUP_S)
    points = []
    for p in reversed(st.used_hist):
        if p[0] < start:
            break
        points.append(p)
    points.reverse()
    return points


def leak(st: GpuState, ts: float, used: float | None, total: float, cfg: DetectorConfig) -> Finding | None:
    """Called every ``EVERY`` seconds per GPU (the engine repeats the verdict in between)."""
    if used is None or not st.pids or total <= 0:
        return None
    fb = st.used_hist
    fb.append((ts, used, -1.0 if st.sm is None else st.sm))
    if used - fb[0][1] < cfg.leak_min_mib:
        return None  # not even the whole history grew enough: the common case, and cheap
    # the history keeps a point every EVERY s, or every sample when the agent samples less often; the
    # longer its interval, the more a window may reach back and fall short for a point to land in it
    # (at 10 s, +-1 s: a 30-s window held 3 points and a 60-s one 53 s of them, so no leak was seen)
    slack = max(0.0, fb[-1][0] - fb[-2][0] - EVERY) if len(fb) > 1 else 0.0
    for span in (URGENT_S, cfg.leak_window_s, 5 * cfg.leak_window_s, LONG_S):
        urgent = span == URGENT_S
        # (a 30-s window holds 25 s of points at 1 Hz, and at a 10-s interval 4 points, one a quarter)
        need = span - 1.5 * EVERY if urgent else 0.9 * span
        points = _window(st, ts, span)
        if slack and (len(points) < 4 or points[-1][0] - points[0][0] < need):
            points = _window(st, ts, span + slack)  # (only then: a point from before the growth fails its fit)
            need -= slack
        if len(points) < 4 or points[-1][0] - points[0][0] < need:
            continue
        line = _line(points, span, cfg)
        if line is None and span == LONG_S:
            line = _floor(points, ts, cfg) or _stairs(points, ts, fb, cfg)
        if line is None:
            continue
        slope, grew = line
        if span < 5 * cfg.leak_window_s and _allocating(st):
            continue
        if span < LONG_S and _idle(points):
            continue  # minutes of growth with no kernel running: a load (weights read from storage), not a leak
        if span < LONG_S and _cycle_edge(_window(st, ts, LONG_S), ts, slope, cfg):
            continue
        allocated = _steps_with_work(fb)
        if _net(ts, used, allocated) < _peak_before(fb, points[0][0], allocated) + cfg.leak_min_mib:
            continue  # back up to where this process has been before: a saw-tooth, not a leak
        tto = (total - used) / slope
        if tto > (URGENT_TTO_S if urgent else cfg.leak_horizon_s):
            continue
        if tto >= CRITICAL_TTO_S and ts - _work_began(st, ts) < CYCLE_S:
            continue  # a young job's growth that leaves half an hour: judged once its work has had a cycle
        causes = [grew,
                  f"{used:.0f} of {total:.0f} MiB used; out of memory in about {tto / 60:.0f} min at this rate",
                  f"same processes since {ts - st.pids_since:.0f} s (not a job start)"]
        summary = f"{st.where()}: memory is leaking, out of memory in about {tto / 60:.0f} min"
        return Finding("memory_leak", "critical" if tto < CRITICAL_TTO_S else "warning", FB_USED, summary, causes, 0.0)
    return None


def _line(points: list[tuple[float, float, float]], span: float, cfg: DetectorConfig) -> tuple[float, str] | None:
    """Growth along a line over the window: its slope (MiB/s) and how it is told, or None. A good fit
    (R² 0.95 over half a minute, 0.9 longer), enough of it, growth in every quarter, and growth that keeps
    going: a ramp that stopped in the last quarter is no leak (over twenty minutes a leak in steps is flat
    between them, and its quarters say it goes on)."""
    slope, r2 = _fit(points)
    growth = points[-1][1] - points[0][1]
    if slope <= 0 or r2 < (0.95 if span == URGENT_S else 0.9) or growth < cfg.leak_min_mib:
        return None
    q = len(points) // 4
    if len(points) >= 5:
        steps = [points[(i + 1) * q if i < 3 else -1][1] - points[i * q][1] for i in range(4)]
    else:  # four points (a 10-s interval) are three steps: each must grow
        steps = [b[1] - a[1] for a, b in itertools.pairwise(points)]
    if min(steps) <= 0.1 * growth / 4 or (points[-1][1] <= points[-2][1] and span < LONG_S):
        return None
    return slope, (f"framebuffer used grew {growth:.0f} MiB in {points[-1][0] - points[0][0]:.0f} s "
                   f"({slope * 60:.0f} MiB/min, R² {r2:.2f})")


def _releases(points: list[tuple[float, float, float]]) -> list[int]:
    """Where the process released memory: the kept points that read ``STEP_MIB`` or more below the one
    before (a cache emptied, the allocator's pool returned: the end of a tooth of a memory cycle)."""
    return [i for i in range(1, len(points)) if points[i - 1][1] - points[i][1] >= STEP_MIB]


def _cycling(points: list[tuple[float, float, float]], rel: list[int], ts: float) -> bool:
    """Whether the job's memory cycles: three releases or more, the last no longer ago than ``CYCLES``
    times the longest time between them (a cycle that stopped is judged as any other growth)."""
    if len(rel) < 3:
        return False
    longest = max(points[b][0] - points[a][0] for a, b in itertools.pairwise(rel))
    return ts - points[rel[-1]][0] <= CYCLES * longest


def _cycle_edge(points: list[tuple[float, float, float]], ts: float, slope: float, cfg: DetectorConfig) -> bool:
    """Whether growth over a short window is the rising edge of the job's own memory cycle: a job whose
    cache grows and is emptied every few minutes, whose floor (what it falls back to) has not risen, growing
    no faster than ``EDGE_PACE`` times its teeth did. Such an edge is no leak however far it climbs above the
    teeth before: a change of work that kept buffers (an evaluation) lifts every tooth after it, and when
    the cache was emptied within the same five seconds the step is hidden in the release (an independently
    written fleet: every GPU of a pod "leaking" 600 MiB a minute, R² 1.00, as its first tooth after an
    evaluation rose). A leak under the cycle raises its floor and is judged there (``_floor``); one faster
    than the teeth, or a cycle that stops releasing, on the windows as any other."""
    rel = _releases(points)
    if not _cycling(points, rel, ts):
        return False
    teeth = [(points[a][0], points[a][1], points[b - 1][0], points[b - 1][1]) for a, b in itertools.pairwise(rel)]
    floors = [trough for _, trough, _, _ in teeth]
    if max(floors) - min(floors) >= cfg.leak_min_mib / 2:
        return False
    edges = sorted((peak - trough) / (tp - tt) for tt, trough, tp, peak in teeth if tp > tt)
    return bool(edges) and slope <= EDGE_PACE * edges[len(edges) // 2]


def _floor(points: list[tuple[float, float, float]], ts: float, cfg: DetectorConfig) -> tuple[float, str] | None:
    """A leak under a memory cycle: the troughs after each release rise along a line (five or more of
    them, R² 0.9, ``leak_min_mib`` or more). A cache that grows and is emptied every minute or two keeps
    any line through the raw points from fitting (R² 0.87 over twenty minutes on an independently written
    fleet's 99-MiB/min leak under a 650-MiB saw-tooth), while what it falls back to climbs at the leak's
    pace. A single step of the floor (an evaluation's buffers kept) fits no line through five troughs."""
    rel = _releases(points)
    if not _cycling(points, rel, ts) or len(rel) < FLOORS:
        return None
    troughs = [points[i] for i in rel]
    slope, r2 = _fit(troughs)
    growth = troughs[-1][1] - troughs[0][1]
    if slope <= 0 or r2 < 0.9 or growth < cfg.leak_min_mib:
        return None
    return slope, (f"the memory it falls back to after each release rose {growth:.0f} MiB over {len(troughs)} "
                   f"cycles in {troughs[-1][0] - troughs[0][0]:.0f} s ({slope * 60:.0f} MiB/min, R² {r2:.2f})")


def _stairs(points: list[tuple[float, float, float]], ts: float, hist: deque[tuple[float, float, float]],
            cfg: DetectorConfig) -> tuple[float, str] | None:
    """A leak in steps on a clock: three or more steps up of ``STEP_MIB`` or more, none released, none at a
    change of work, as regular in time and size as ``REGULAR`` allows, the last no longer ago than the
    longest gap allows. An allocation kept per epoch or per batch of requests comes that way, every few
    minutes; three steps fit no line well in twenty minutes (R² 0.88-0.90 on an independently written
    fleet's 70-155 MiB/min leaks in 0.5-1 GiB steps, 3 of 13 missed). An allocator meeting longer inputs
    steps ever more rarely and ever smaller, and a job changing its work allocates with the change."""
    if _releases(points):
        return None
    ups = [(points[i][0], points[i][1] - points[i - 1][1]) for i in range(1, len(points))
           if points[i][1] - points[i - 1][1] >= STEP_MIB]
    if len(ups) < 3:
        return None
    with_work = {at for at, _ in _steps_with_work(hist)}
    ups = [(at, mib) for at, mib in ups if at not in with_work]
    if len(ups) < 3:
        return None
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ups)]
    sizes = [mib for _, mib in ups]
    if max(gaps) > REGULAR * min(gaps) or max(sizes) > 2.0 * min(sizes) or ts - ups[-1][0] > REGULAR * max(gaps):
        return None
    growth = sum(sizes)
    slope = sum(sizes[1:]) / (ups[-1][0] - ups[0][0])
    if growth < cfg.leak_min_mib:
        return None
    return slope, (f"framebuffer used grew {growth:.0f} MiB in {len(ups)} steps of about {sizes[-1]:.0f} MiB, one "
                   f"every {sum(gaps) / len(gaps):.0f} s, none released ({slope * 60:.0f} MiB/min)")


def _work_began(st: GpuState, ts: float) -> float:
    """When the process's work began: the first half-minute of kept points most of which (four of six)
    read SM activity of ``WORKING`` or more (``ts`` if none; most, not all, as a young job's first
    steps share their half-minute with its start-up). A job's memory cycles begin with its work, not
    its process: a training job that spent seven minutes loading and compiling grew its allocator's
    first tooth at ten minutes of age and three of work (an independently written fleet: 16 false
    leaks on 8-GPU pods). A compile's trial kernels come as single samples among idle ones, at most
    every other one, and are no start of work: an 8-GPU job whose compile read 0.41, 0, 0.57, 0, 0.62
    and then idled four minutes grew its steps' last 0.8 GiB while they ramped up, 60-90 s into its
    work (the same fleet: 8 false leaks, judged from the compile when half of the points sufficed).
    The history is the process's own and 20 minutes long, so an older job's work counts as old."""
    window: deque[tuple[float, float]] = deque(maxlen=_WORK_POINTS)
    for t, _, sm in st.used_hist:
        window.append((t, sm))
        if len(window) == _WORK_POINTS and sorted(x for _, x in window)[_IDLE_POINTS] >= WORKING:
            return window[0][0]
    return ts


def _peak_before(hist: deque[tuple[float, float, float]], start: float, steps: list[tuple[float, float]]) -> float:
    """The most memory the process used in the ``CYCLE_S`` before ``start``, net of its steps with work
    (the history is its own: cleared when the processes change). A job that frees memory every few
    minutes (a cache emptied at each evaluation, the allocator's pool released) grows back up to where
    it was each time; a leak raises that mark. Only the last minutes: a process that once held more (an
    earlier leak, since freed) can leak again below that mark."""
    return max((_net(t, used, steps) for t, used, _ in hist if start - CYCLE_S <= t < start), default=0.0)


def _net(t: float, used: float, steps: list[tuple[float, float]]) -> float:
    """Memory used at ``t`` less what the process allocated in steps with its work until then."""
    return used - sum(mib for at, mib in steps if at <= t)


def _steps_with_work(hist: deque[tuple[float, float, float]]) -> list[tuple[float, float]]:
    """When, and how many MiB, the process allocated in steps that came as its work changed
    (``STEP_MIB`` or more between two kept points, at a point where the median SM activity of the
    half-minutes on either side differs by ``WORK_CHANGED`` or more, and not followed by growth at the
    same pace: a fast leak that began with the work is no step). An evaluation that keeps its buffers,
    a new batch size or sequence length, allocate once for the work that changes with them; a job whose
    cache grows and is emptied in cycles then grows its teeth up from a mark raised by that step. On an
    independently written fleet 17 of 17 false leaks in three traces were such teeth after an
    evaluation had kept 0.3-2 GiB, and 13 are no longer reported (docs/benchmarks.md, round 26); the
    other four came where the cache was emptied within the same five seconds as the step, which the
    kept points then do not show. A leak under unchanged work raises the mark only by growing: a leak in
    steps (an allocation per batch kept) steps with no change of work.
    Called only for growth that passed a fit, so the scan is rare."""
    pts = list(hist)
    steps = []
    for i in range(1, len(pts)):
        jump = pts[i][1] - pts[i - 1][1]
        if jump < STEP_MIB:
            continue
        after = [b[1] - a[1] for a, b in itertools.pairwise(pts[i:i + _WORK_POINTS])]
        if after and jump < STEP_PACE * sorted(after)[len(after) // 2]:
            continue
        before = _median_sm(pts[max(0, i - _WORK_POINTS):i])
        now = _median_sm(pts[i:i + _WORK_POINTS])
        if before is None or now is None:
            continue
        low, high = sorted((before, now))
        if high >= WORKING and low < (1.0 - WORK_CHANGED) * high:
            steps.append((pts[i][0], jump))
    return steps


def _idle(points: list[tuple[float, float, float]]) -> bool:
    """Whether most kept points read no work (SM activity below ``WORKING``; a GPU that reports no SM
    activity is not idle by it)."""
    sm = _median_sm(points)
    return sm is not None and sm < WORKING


def _median_sm(points: list[tuple[float, float, float]]) -> float | None:
    """The median SM activity of kept points that read it (-1 marks a sample without)."""
    sms = sorted(sm for _, _, sm in points if sm >= 0.0)
    return sms[len(sms) // 2] if sms else None


def _allocating(st: GpuState) -> bool:
    """Whether the growth is allocation for work that began with it, or has no work under it (module
    docstring). Called only for growth that passed a fit, so the scans are rare."""
    hist = st.used_hist
    onset, gap = hist[0][0], 0.0  # the growth began after the last kept point that did not grow ...
    for i in range(len(hist) - 1, 0, -1):
        if hist[i][1] <= hist[i - 1][1]:
            onset = hist[i][0]
            gap = hist[i + 1][0] - onset if i + 1 < len(hist) else 0.0  # ... and before the next (EVERY s or more)
            break
    samples = st.level.samples
    during = sorted(sm for t, sm in samples if t > onset)
    if not during:
        return False
    work = during[len(during) // 2]
    if work < WORKING:
        return True
    first = _work_began(st, math.inf)
    if first <= onset < first + FIRST_WORK_S:
        return True  # the job's first steps allocate their activations and optimizer state
    began = next((t for t, sm in reversed(samples) if t <= onset and sm < WORKING), None)
    return began is not None and began >= onset - COINCIDE_S - max(0.0, gap - EVERY)
