"""SM-activity detectors: throughput drop, straggler, idle allocated GPU.

Why the kind of workload decides what a fall means (collector/detect/level.py says how it
is told from behaviour):

* A **steady** workload (training, batch) does the same work all the time, so a fall
  well below its working level with the same process alive is lost throughput, whether
  it comes as a step or as a drift over minutes, whether one GPU or the whole job fell
  (a job-wide fall is input, CPU or a dependency), and however deep it goes while the
  GPU still gets work: an input-starved job reads an SM activity of a few percent, not
  zero (the real H200 stall read 0.03 against 0.18, the CPU-starved one 0.01). How long
  it must last depends on what it looks like. A fall to below ``DEEP`` of the level, or
  one whose samples come in bursts (``BURSTY``: a step runs whenever a batch arrives,
  then the GPU waits) is a job waiting for work: 60 s. A smooth fall to a new, lower
  plateau is what an evaluation or validation pass looks like (forward passes, less
  work per second): it must outlast ``smooth_hold_s`` (90 s) unless it is deep or
  bursty. When every GPU of a multi-GPU pod fell together (evaluation and checkpoints
  pause the whole job at once): 150 s, unless three of the job's dips like this fall agree
  on a period and the fall is off it (not one of its evaluations: judged as one GPU's fall),
  or the host says the job waits for a CPU (contention, CFS throttling);
  and 150 s too when the pod's other GPUs are at work but their samples are not of this
  moment (a partition delivered late: whether the pod fell cannot be told). Longer still
  when the job has already recovered from dips this deep and the fall comes on the job's
  rhythm (level.py). A replica of a service whose other replicas move with their demand is
  judged as demand-driven even when traffic pinned it at its cap for minutes.
* What a fall of a steady job is *not*: an idle GPU (no kernel at all: no SM activity for
  10 s with the process alive is the idle detector's case, after its own wait: a job that
  finished but holds the GPU); a launch-bound phase (utilisation far above SM
  activity: the launch-bound detector's case, which names the remedy); a copy (PCIe
  traffic above ``COPYING`` that lands in device memory: a checkpoint going out, judged from when the copy ends;
  one coming in is a weights load for a minute, and past that the job's input arriving slower than it computes;
  a copy is traffic the working job did not move, or one-way traffic: a job spread over nodes moves its
  collectives over PCIe both ways all the time, ``launch.copy_stage``); and, for ``DIP_MAX_S``, a fall that
  came at once with the GPU as occupied as before (utilisation at 85% of what it was: forward passes back to
  back, an evaluation), which waits for nothing.
* A steady workload whose service's other pods fell with it, when none of them exchanges data with another
  (under ``COPYING`` over PCIe at work: replicas of a server, which run flat out while a batch client sends
  and fall together when it stops), fell with its demand. The pods of one job spread over nodes also fall
  together, from their input, but they exchange their gradients over RDMA.
* A **demand-driven** workload (serving) moves with its traffic, which differs between
  replicas (sticky sessions, cache-aware routing, regions) and over the day, so lower
  activity than before or than its peers is not by itself a fault. It is evidence of
  lost capacity only as a *step*: a fall of 35% within half a minute from where it sat in
  the two minutes before (the lower quartile of its 5-second blocks: a burst of demand
  ending is not a step), four times as large as the blocks' scatter, to a new level that
  holds (a replica still falling is draining: it must settle before it counts); and only
  when nothing explains it as demand: its activity did not go to near
  zero (a drained replica), the other replicas did not step down with it (traffic moved
  away from all of them), no other replica stepped up as much at the same moment, nor
  up to four of them together (traffic moved to it or to them), and when replicas were
  added or restarted just before, no other replica fell with it (the load was shared out
  anew) and the fall is no deeper than ``k`` newcomers could take (``k / (k + 1)`` of its
  load; a replica that exits only makes the others busier). Like a steady job's, it must outlast the
  dips this replica already recovered from. Where the agent scrapes the replica's
  inference server (requests/s, queue time, pending requests: evidence.py), its figures
  decide what activity cannot: fewer requests and no queue is demand (no finding), a queue
  that grows is capacity lost while work waited (reported), and the same requests with no
  queue is a cheaper mix of them (shorter prompts, cache hits), not a fault.

Inside a multi-GPU pod one GPU behind the others is a straggler: not a GPU with no kernel at all
while the others work (a synchronous job's others would be waiting for it, so these GPUs do
separate work: a notebook's), nor one of a pod whose GPUs all fell (``POD_FELL``: the pod's fall).
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.detect.evidence import Verdict
from collector.detect.finding import DetectorConfig, Finding
from collector.detect.launch import COPYING, copy_stage, copying, hung, util_at
from collector.detect.level import (
    CUSUM_H,
    CUSUM_WINDOW,
    DUTY_MEAN,
    DUTY_S,
    IDLE,
    PLATEAU,
    YOUNG_DEEP,
    ZERO,
    ActivityLevel,
)
from collector.detect.state import GpuState
from telemetry.clocks import BRAKE, POWER, THERMAL, names
from telemetry.keys import SM_ACTIVE
from telemetry.pods import deployment_pod

RECOVERED = 0.75  # a peer (or a pod's other GPUs) above this fraction of its level has not fallen
BAND = 0.05  # a fall ends when activity is back this far above the ratio that started it
REPLICATED_S = 3600.0  # a service seen with replicas this recently is a server's (one may be alone for now)
DIP_MAX_S = 300.0  # falls that recover within this long are remembered as the job's dips
POD_FELL = 0.5  # a pod whose other GPUs are below this fraction of their levels fell as a whole
DEEP = 0.3  # a fall below this fraction of the level: the GPU mostly waits
_CHANGE_WINDOW_S = 180.0
# a fall whose utilisation stays this many times its SM activity runs kernels on a fraction of the SMs:
# launch-bound work (the launch-bound detector's finding, from DetectorConfig.launch_ratio up) or a phase
# of smaller kernels (an evaluation, small batches: 80% against 0.18), not a job waiting for work. It was
# launch_ratio, 4, until that went to 10 (2026-12-06); falls between the two stay excused as they were.
SMALL_KERNELS = 4.0
OCCUPIED = 0.85  # a fall's utilisation at this fraction of what it was before, or more: as occupied
_OCCUPIED_BACK_S = 10.0  # "before": this long before the fall began
# ... or, where it only lengthens a fall's hold to DIP_MAX_S (an evaluation-like fall, not an excuse),
# utilisation fell by less than a third as much as SM activity did (relative falls): a 16-GPU job's
# evaluation, SM activity 0.66 -> 0.26 while utilisation went 94% -> 80% (0.85 of it, on the line: read
# as "waits" on one sample in ten, and reported when its pod hold ran out; an independently written
# fleet, 14 false drops at once). A job that waits leaves gaps as long as its SMs' idle time. As the
# excuse of a step (``_explained``'s "busy", which rebases at once) it cost a 4-GPU job's slow drift
# (SM activity 0.51 -> 0.24 with utilisation 0.69 -> 0.57), so there the plain ratio stays.
LIGHTER = 3.0
EVAL_LATCH_S = 20.0  # a fall judged evaluation-like stays so this long after its last sample to say so
_SAME_TIME_S = 10.0  # a straggler is judged against its peers' readings of (about) the same moment
_SHARED_BACK_S = 60.0  # a peer that fell with a replica is compared with its blocks of this long before
_STEP_S = 30.0  # a step falls within this long; peers are compared with it this long after it began
_HOST_SHOWS_S = 30.0  # a replica's step is read as less traffic only once its host's figures had this long
_MOVED_S = 90.0  # a peer's rise that explains a step must last this long (a burst of demand passes)
# a step's start as its CUSUM run places it (the first sample below the anchor's band) may come this long
# before the change that made it: request noise can bring a run's first sample forward by a few samples
_LOCATE_S = 15.0
WAIT = "wait"
_ABRUPT_S = 20.0  # a fall that left the plateau less than this long ago came at once (not a drift)
_VERDICT_EVERY_S = 5.0  # the evidence is weighed again this often during a fall (its readings come every 2 s)
_FORGET_S = 300.0  # how far back before a reported fall its way down is looked for
# host-side causes that no evaluation or checkpoint produces (input waits and one busy thread may be a
# checkpoint writing, or pickling on one thread): a pod-wide fall with one of them is no pod pause
_CPU_STARVED = ("contention", "throttled")
_AFTER_COPY_S = 30.0  # a fall that began this soon after a copy ended is the copy's stage (a checkpoint's write)
_YOUNG_S = 60.0  # a level not yet established: its highest block of this long ago is where it fell from
_NEW_CAUSE_S = 20.0  # a reported fall's host evidence is weighed again over this window for a new cause ...
_NEW_CAUSE_HOLD_S = 10.0  # ... which must name the same new cause this long
# host-to-device copies that go on this long while the GPU falls are the job's input, not a weights load
# (a model's weights load at its start, before it has a level, or with a new memory footprint: a new phase)
INPUT_COPY_S = 60.0
# ... while the job still runs its steps between them: SM activity at least this fraction of its level.
# A copy stage that does no SM work at all is a transfer the job makes as its work (an ETL job's slot,
# a dataset staged onto the GPU), judged from when it ends. Where the line sits: the tuning generator's
# ETL copy slots run at 0.6-1.9% of their level, the real traces u and x (each step's batch copied
# from pageable host memory) at 8% and 16%
INPUT_WORK = 0.05
_DUTY_BACK_S = (60.0, 45.0, DUTY_S + 2.0)  # how far back a lone GPU's bursts between waits are looked for
# a "level" whose blocks' samples vary more than their mean holds idle seconds: it is bursts, not work at a
# level, and a job cannot be found waiting between bursts at it. Such is a job still loading and compiling,
# whose autotuning runs a kernel for a second every few seconds (the independent fleet's LoRA fine-tunes,
# 2-3 minutes old: single samples at 0.2-0.7 among idle ones, a per-sample variation of 140-220%, each
# lull reported as a loader that could not keep up). A noisy job at work varies by 15-20%, a duty-cycled
# block of three busy seconds in five by 90%
BURSTS = 1.0


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def _pids(st: GpuState) -> str:
    pids = sorted(st.pids)
    text = ", ".join(str(p) for p in pids[:3]) + (", ..." if len(pids) > 3 else "")
    return f"process{'es' if len(pids) > 1 else ''} {text}"


def _mode(lv: ActivityLevel, svc_peers: Sequence[GpuState]) -> str:
    """``steady`` or ``step`` once behaviour says which (10 minutes of it). Before, a GPU with
    no other replicas in its service that has held a tight plateau for 40 s, or one it leaves
    only in dips with calm samples (``calm``: each second's work alike, as a step loop's is,
    though its blocks wander with the speed of its input: the real H200 trace d), is taken
    for a steady job (a lone training process on a bare host: a fall is reported within
    90 s); a replica of a service whose other replicas mostly move with their demand, for one
    that does too (``step``); any other is judged by the stricter of both rules (``unsure``:
    only a step counts, and it must last as long as a steady job's fall)."""
    if lv.steady is not None:
        if lv.steady and 2 * sum(1 for p in svc_peers if p.level.steady is False) > len(svc_peers):
            return "step"  # a replica pinned at its cap by traffic, while the service's others move with theirs
        return "steady" if lv.steady else "step"
    if svc_peers and 2 * sum(1 for p in svc_peers if p.level.steady is False) > len(svc_peers):
        # a young replica of a service whose others are known to move with their demand moves with its
        # own: an assist replica 7 minutes old whose share of the traffic went to its three peers was
        # judged by the stricter rule, and reported (an independently written fleet, 198 and 422 s)
        return "step"
    return "steady" if (lv.tight or lv.calm) and not svc_peers else "unsure"


def verdict(st: GpuState, since: float, ts: float) -> Verdict | None:
    """What the host and inference-server evidence says of a fall that began at ``since``
    (None: the agent sent none), weighed at most every few seconds."""
    ev = st.evidence
    if not ev.seen:
        return None
    cached = st.verdict
    if cached is not None and cached[0] > ts - _VERDICT_EVERY_S and cached[1].since == since:
        return cached[1]
    lv = st.level
    ref = lv.ep_ref or lv.level
    found = ev.weigh(since, ts, min(1.0, lv.fast / ref) if ref > 0 else 1.0)
    st.verdict = (ts, found)
    return found


def _young(st: GpuState, ts: float, lone: bool, fallen: float) -> bool:
    """A fall from a level held too briefly to count yet, of a lone GPU that nothing says serves
    requests (an inference server after its warm-up waits for traffic, and sleeps): a fault of a
    steady job when it is deep and the host names a cause (the real H200 trace i: a stall 20 s into
    a job, 84% down), or when since it left that level the job has worked in bursts at it between
    idle waits for 30 s (``ActivityLevel.duty_cycled``: a job whose input cannot keep up, the real
    H200 traces j and m, whose host showed no cause: its loader sleeps while it reads), or when
    host-to-device copies went on for ``INPUT_COPY_S`` (its input over PCIe). Judged from when it
    left that level, on the evidence since then. A level of bursts (``BURSTS``) is none."""
    lv = st.level
    if not lone or lv.plateau_blocks == 0 or lv.noise > BURSTS or st.evidence.serves():
        return False
    ref = lv.high_within(ts, _YOUNG_S)
    if ref < 2 * IDLE or lv.fast >= DUTY_MEAN * ref:
        return False
    since = lv.left_plateau(ref, ts, _YOUNG_S)
    found = verdict(st, since, ts)
    # its input arriving over PCIe for a minute names a cause as the host's readings do (the real H200
    # trace u: pageable host-to-device copies 50 s into a job, SM activity 0.035 of 0.43)
    fed = _fed(st, ts, ref)
    if lv.fast < YOUNG_DEEP * ref and ((found is not None and found.host_side) or fed):
        lv.start_episode(since, ref, "steady", True, lead=ts - since, fallen=fallen)
        return True
    if (found is None or found.cause != "demand") and lv.duty_cycled(since, ts, ref):
        lv.start_episode(since, ref, "steady", True, lead=ts - since, waits=True, fallen=fallen)
        return True
    return False


def _duty_since(lv: ActivityLevel, ts: float, ref: float) -> float | None:
    """Since when (the earliest of the last minute, 45 s or 32 s) a lone GPU's samples came as bursts
    at its level between idle waits (``ActivityLevel.duty_cycled``); None if they did not. Why: a
    job whose input cannot keep up reads so whatever else its history says, and a young job's
    history says little. The real H200 trace s: an unreported drift and an evaluation had cost
    the job its plateau hints, so it was judged as a job of unknown kind (only a step counts),
    and each of its loader's waits opened a step that the next burst ended. A lone GPU without
    a level of its own is judged so already (``_young``); one with a level is no different, while
    its kind is not known: one seen moving with its demand (``step``) bursts with its requests."""
    for back in _DUTY_BACK_S:
        if lv.duty_cycled(ts - back, ts, ref):
            return max(ts - back, lv.incident[1])  # not inside the last reported fall (``duty_cycled``)
    return None


def _new_cause(st: GpuState, ts: float) -> bool:
    """Whether a reported fall that the host named (contention, one busy thread, input) has a new
    host-side cause since some seconds: the host readings of the last ``_NEW_CAUSE_S`` name a
    different cause, one that changed at the start of that window, for ``_NEW_CAUSE_HOLD_S``. Why:
    a job whose CPU contention ended, and whose input then went to one thread 20 s later, never
    came back to its level for the 10 s that end a fall (its work in between came in bursts), so
    the second incident stayed inside the first one's anomaly, named by the first cause (the real
    H200 trace p). A cause that only goes on reads as no change in a window inside it."""
    was = st.drop_cause
    if was is None or ts - st.new_cause_at < _VERDICT_EVERY_S:
        return False
    st.new_cause_at = ts
    lv = st.level
    now = st.evidence.weigh(ts - _NEW_CAUSE_S, ts, min(1.0, lv.fast / lv.ep_ref) if lv.ep_ref > 0 else 1.0)
    if not now.host_side or now.cause in (was, "queue"):
        st.new_cause = None
        return False
    seen = st.new_cause
    if seen is None or seen[1] != now.cause:
        st.new_cause = (ts, now.cause)
        return False
    return ts - seen[0] >= _NEW_CAUSE_HOLD_S


def _start(st: GpuState, ts: float, cfg: DetectorConfig, mode: str, replicated: bool, lone: bool) -> bool:
    lv = st.level
    fast = lv.fast
    if fast < ZERO:
        return False
    if not lv.established:
        return _young(st, ts, lone, cfg.drop_ratio)
    ref = lv.level
    if fast < cfg.drop_ratio * ref and ref - fast >= 4.0 * lv.spread \
            and lv.high_within(ts, _STEP_S) >= cfg.drop_ratio * ref:  # falling to here, not rising from idle
        # a demand-driven (or not yet known) workload's fall is a steady job's when the host says why:
        # a host-side cause is the evidence of lost capacity that its activity alone cannot give. It is
        # judged from when it left the plateau (the evidence needs some seconds of readings to tell)
        if mode == "steady":
            abrupt = lv.high_within(ts, _ABRUPT_S) >= PLATEAU * ref
            since = lv.left_plateau(ref, ts, _ABRUPT_S) if abrupt else ts
            lv.start_episode(since, ref, "steady", abrupt, lead=ts - since, fallen=cfg.drop_ratio)
            return True
        since = lv.left_plateau(ref, ts, _STEP_S)
        found = verdict(st, since, ts)
        if found is not None and found.host_side and not _awaits_requests(st, found, replicated):
            lv.start_episode(since, ref, "steady", since > ts - _STEP_S, lead=ts - since, fallen=cfg.drop_ratio)
            return True
        if mode == "unsure" and lone and (found is None or found.cause != "demand") and not st.evidence.serves() \
                and lv.noise <= BURSTS:
            waited = _duty_since(lv, ts, ref)
            if waited is not None:
                lv.start_episode(waited, ref, "steady", True, lead=ts - waited, waits=True, fallen=cfg.drop_ratio)
                return True
    if fast < cfg.drop_ratio * ref and ref - fast >= 4.0 * lv.spread and lv.pause[1] >= ts - _STEP_S \
            and lv.worked_within(ts, _STEP_S) >= cfg.drop_ratio * ref and st.util_slow < SMALL_KERNELS * st.sm_slow:
        # low since a pause ended (a checkpoint's barrier: kernels resident and SMs idle, closed as launch-bound
        # work when the job's kernels came back, its work not back): the pause explained itself, not what came
        # after it. An independently written fleet's 7-GPU pod went from a rank-0 checkpoint's barrier into an
        # input stall of 6 minutes (SM activity 0.2 of its level, its loaders asleep and blocked on storage)
        # and, rising from the barrier's 0.01, was never judged. Judged from the pause's start when the host
        # names a cause (an evaluation after a checkpoint names none, and is left to the pod's rhythm as before),
        # and only once kernels are no longer resident far beyond the SMs' work (the pause's spin is over): a
        # launch-bound phase that goes on is no pause that ended (a fine-tune's 20 minutes of tiny kernels were
        # reported five times by a first version)
        since = lv.pause[0]
        found = verdict(st, since, ts)
        if found is not None and found.host_side and not _awaits_requests(st, found, replicated):
            lv.start_episode(since, ref, "steady", True, lead=ts - since, fallen=cfg.drop_ratio)
            return True
    if mode == "steady":
        return False
    if lv.cusum < CUSUM_H or not lv.cusum_n:
        return False
    since = lv.cusum_since
    if ts - since > CUSUM_WINDOW:
        lv.cusum = 0.0  # it took minutes to add up: a drift, not a step
        return False
    ref = lv.step_anchor()
    new = lv.cusum_sum / lv.cusum_n
    end, rough = lv.step_line()
    rising = end > ref and rough <= 0.25 * (end - new)
    if rising:
        ref = end  # on a smooth rising wave: it fell from where the wave had taken it
    if new >= cfg.step_ratio * ref:
        return False
    if not rising:
        # on a smooth falling wave the anchor (held where the run began) is above where the wave has
        # taken it since: the run is judged against the wave, read in its middle
        on, rough = lv.step_line(0.5 * (since + ts))
        if on < ref and rough <= 0.25 * (ref - on):
            ref = on
    fall = ref - new
    if new < cfg.step_ratio * ref and fall >= 0.1 and lv.high_within(ts, ts - since + _STEP_S) >= ref - 0.5 * fall \
            and max(lv.fast, lv.last) < (cfg.step_ratio + BAND) * ref:
        # (a step whose samples are back up is over: the run of low samples that made it ended, and
        # from the way back up, judged from when it began, it was reported as it recovered)
        # a new level 35% lower, and still up half a minute before it: judged from when it fell
        lv.start_episode(since, ref, mode, True)
        lv.ep_sum, lv.ep_n = lv.cusum_sum, lv.cusum_n
        return True
    return False


def _fell(p: GpuState, ratio: float) -> bool:
    """Whether a peer is in a fall of its own, or just stepped below ``ratio`` of where it was
    (its slow mean: one sample of request noise is not a fall)."""
    lv = p.level
    if lv.ep_ref:
        return True
    anchor = lv.step_anchor()
    return anchor > 0 and lv.slow < ratio * anchor


def _rose_with(p: GpuState, since: float, ts: float) -> float:
    """How far a peer rose at about the moment ``since``, beyond its noise: its slow mean now
    above where it sat, the lowest it was in the half minute before ``since`` (a burst of demand
    under way all that time is not traffic moving to it now) and its mean in the 15 s before
    (traffic that moves rises on its new replicas at the moment it falls on the old one, while a
    burst that began 20 s before the step is the peer's own demand), less three times the
    noise of that mean (request noise on a replica sampled every few seconds is not a rise).
    In the first minute and a half its mean since ``since`` counts too: the slow mean shows a
    step only some tens of seconds after it, while the mean of the blocks since shows it at once."""
    lv = p.level
    anchor = lv.anchor_at(since)
    if anchor <= 0:
        return 0.0
    now = lv.slow if ts - since >= _MOVED_S else max(lv.slow, lv.mean_between(since + 5.0, ts))
    before = max(anchor, lv.low_between(since - _STEP_S, since - 5.0), lv.mean_between(since - 15.0, since - 5.0))
    return now - before - 3.0 * 0.45 * lv.jitter / 1.128


def _fell_with(p: GpuState, since: float, ts: float, depth: float) -> bool:
    """Whether a peer fell at about the moment ``since`` by at least half of ``depth`` (this replica's
    fall, as a fraction of its level) and a quarter of where it was, beyond its noise: the mean of its
    blocks in the minute before against the mean of those since (a minute: a slide over a minute is
    confirmed as a step late, when the peer's last blocks before it were already sliding too)."""
    lv = p.level
    before = lv.mean_between(since - _SHARED_BACK_S, since - 5.0)
    after = lv.mean_between(since + 5.0, ts)
    if before <= 0 or after < 0:
        return False
    noise = max(0.01, lv.jitter / 1.128 / 2.0)
    return before - after >= max(0.5 * depth * before, 0.25 * before, 3.0 * noise)


def _moved_with(p: GpuState, since: float, ts: float, joins: bool) -> bool:
    """Whether a peer's activity changed at about the moment ``since``, beyond its noise: one
    that lost a share of the load with this one (falling), or, where ``joins`` says a join can
    explain the step at all, a replica that joined just before beginning to serve (its activity
    rising from its loading)."""
    lv = p.level
    before = lv.mean_between(since - _STEP_S, since - 5.0)
    if before < 0:
        return joins and p.pids_since <= since + _LOCATE_S  # it was starting up: a join at this very moment
    after = lv.mean_between(since, ts)
    if after < 0:
        return False
    noise = max(0.01, lv.jitter / 1.128 / 2.0)  # a 5-second block's scatter, from the samples'
    change = after - before
    if -change >= max(0.15 * before, 3.0 * noise):
        return True
    return joins and p.pids_since >= since - _CHANGE_WINDOW_S and change >= max(0.02, 3.0 * noise)


def _join_can_explain(lv: ActivityLevel, lost: float, svc_peers: Sequence[GpuState]) -> bool:
    """Whether replicas that joined just before can have taken this much of this replica's load:
    ``k`` new replicas sharing a load with it take at most ``k / (k + 1)`` of it (when it and they
    are all that share it: regional or node-local routing), so a single join does not explain a
    fall to a third while the other replicas kept theirs (0.1 of slack for uneven routing)."""
    k = sum(1 for p in svc_peers if p.pids_since >= lv.ep_start - _CHANGE_WINDOW_S)
    return lost <= (k / (k + 1) + 0.1) * lv.ep_ref


def _shared(st: GpuState, ts: float, svc_peers: Sequence[GpuState], lost: float) -> str | None:
    """Why the service's demand fell, if two thirds of its other replicas fell by as much at the
    moment this one did (replicas that wander on their own rarely agree so)."""
    lv = st.level
    shared = sum(1 for p in svc_peers if _fell_with(p, lv.ep_start, ts, lost / lv.ep_ref))
    if 3 * shared < 2 * len(svc_peers):
        return None
    return (f"{shared} of the service's {len(svc_peers)} other replicas fell as much at the same time "
            "(the service's demand fell)")


def _awaits_requests(st: GpuState, found: Verdict | None, replicated: bool) -> bool:
    """Whether a server's replica fell because it had less to do: its feeding thread went to sleep
    with its GPU (``ASLEEP`` of the time, more than before) and nothing it reads waits on storage.

    Why: a server with no requests sleeps in its event loop, as a training job waiting for its
    input sleeps on its loader's queue; the job's wait is a fault, the server's is its demand. A
    server whose capacity is lost while requests wait keeps its threads awake: they wait for a
    CPU (contention, throttling, weighed before this), or spin on a slower GPU. An independently
    written fleet's embedding service, whose batch clients come and go, had its replicas' falls
    to a thin online stream reported as drops (47 of 108 false drops over 12 traces): asleep 75%
    of the time after, 15% before. Only for a service seen with replicas that exchange no data
    (``replicated``, the engine's memory of ``replicas``; the replica may be alone for now): the
    pods of a job spread over nodes wait on their input together, and a lone job is no server.

    A Deployment's pod (``deployment_pod``) is a server by how it was made, whether or not other
    replicas were seen lately (an embedding service ran one replica for an hour; each fall of its
    traffic was reported). Its process merely running less (``Verdict.quieter``) says so too: its
    loop wakes for fewer requests without sleeping ``ASLEEP`` of the time. Not for other pods:
    one-GPU fine-tunes share a service label and exchange no data as replicas do, and a fine-tune
    whose input path slows sleeps more and runs less in just that way."""
    if found is None or not replicas(st, ()):
        return False
    server = deployment_pod(st.pod)
    if found.cause == "input":
        return (replicated or server) and found.asleep and not found.io
    return server and found.cause == "none" and found.quieter


def replicas(st: GpuState, svc_peers: Sequence[GpuState]) -> bool:
    """Whether the service's pods are replicas that exchange no data: each moved less than ``COPYING``
    over PCIe at work, where that was read. The pods of one job spread over nodes exchange their
    gradients or activations over RDMA, gigabytes a second through PCIe; replicas of a server answer
    their own requests (an embedding service's read 10-50 MB/s)."""
    return all(0.0 <= p.pcie_work < COPYING for p in (st, *svc_peers))


def _demand_explains(st: GpuState, ts: float, cfg: DetectorConfig, svc_peers: Sequence[GpuState],
                     svc_changed: float, found: Verdict | None = None) -> str | None:
    """Why a step of a demand-driven workload may be demand, not lost capacity (None: nothing
    does; ``WAIT``: perhaps, judged once it has lasted ``_MOVED_S``; ``found``: what the host's
    figures say of the fall, none of it host-side)."""
    lv = st.level
    if lv.ep_mode == "step" and lv.ep_abrupt and svc_peers and replicas(st, svc_peers) and found is not None \
            and found.cause == "none" and not st.evidence.serves() and lv.fast >= DEEP * lv.ep_ref \
            and "throughput_drop" not in st.open:
        # a replica known to move with its demand (ten minutes of it), still at work, with the host's
        # figures read and unchanged: what feeds it did not slow, so it is sent less. A server that
        # loses capacity with its work waiting shows it on the host (its process or container starved
        # of CPU, the node under pressure: those falls are judged), on its clocks (a throttling
        # finding) or in errors; its SMs waiting for work at the same demand need one of those. An
        # independently written fleet's routing (sticky sessions, prefix-aware) moved a third to a
        # half of a chat replica's traffic to its peers for a minute or more, a little to each: 29 false
        # drops on chat and assist replicas in five sets of its traces (round 27). Without an inference
        # server's figures (``serves``: then its queue says whether work waited) and host figures,
        # the step is judged as before; so is a GPU that is no replica of a service (a job whose activity
        # varies is "step" by its behaviour too: a fresh set of that fleet lost 4 of 9 slow drifts of
        # training jobs to a first version without the replicas), and a fall that came as a drift.
        # Decided once the host's figures have had ``_HOST_SHOWS_S`` to
        # turn: a replica's CPU starvation read as "unchanged" 3 s into its fall, and its step was taken
        # for its new normal
        if ts - lv.ep_start < _HOST_SHOWS_S:
            return WAIT
        return (f"its activity stepped to {lv.fast / lv.ep_ref:.0%} of its level with its host's figures "
                "unchanged: a replica still at work, sent less (its share of the traffic moved), not slower")
    # drained: its traffic went to the other replicas, and a replica with no requests does no work, so
    # only an idle GPU reads as drained (the real H200 trace f's contention fell to 0.08 with no peers;
    # a replica that lost two thirds of its capacity at a tenth of its SMs still serves)
    if lv.fast < IDLE:
        return "its activity went to near zero: drained or no longer routed to, not slower"
    if not svc_peers:
        return None
    since = ts - lv.ep_start
    lost = lv.ep_ref * (1.0 - min(lv.fast / lv.ep_ref, lv.episode_depth()))  # the new level, not the way down
    if since <= CUSUM_WINDOW:  # a peer's fall is read from its state now: only while the step is recent
        fell = sum(1 for p in svc_peers if _fell(p, cfg.step_ratio))
        if fell >= max(1, len(svc_peers) // 2):
            return f"{fell} of the service's {len(svc_peers)} other replicas stepped down too (traffic moved)"
    elif since > _MOVED_S + 10.0:
        return None
    # the service's demand fell: most of its other replicas fell with it, read from their blocks around
    # the step's start (a peer that slid down over a minute is in no fall of its own and has no step to
    # show, while this one's CUSUM called its slide a step: an embedding service's batch ending)
    shared = _shared(st, ts, svc_peers, lost)
    if shared:
        return shared
    if svc_changed >= lv.ep_start - _CHANGE_WINDOW_S:
        # read from the peers' blocks around the step's start, so it holds for a step confirmed late (a
        # noisy replica's CUSUM took 75 s to confirm a step that a join on its node had made)
        joins = _join_can_explain(lv, lost, svc_peers)
        moved = next((p for p in svc_peers if _moved_with(p, lv.ep_start, ts, joins)), None)
        if moved is not None:
            return (f"the service's replicas changed just before and {moved.where()} moved at the same moment "
                    f"(the load was shared out anew: autoscaling or a rollout)")
    # traffic that left this replica went to the others: together they rose by as much at the same moment
    # (one replica taking it all, a canary promoted, or up to four taking a share each; a peer's smaller
    # rise is its own demand moving, and many of those add up to anything)
    rises = sorted(((r, p) for p in svc_peers if (r := _rose_with(p, lv.ep_start, ts)) >= 0.25 * lost),
                   key=lambda x: -x[0])
    risen = sum(r for r, _ in rises)
    if since < _MOVED_S and risen >= 0.5 * lost:
        # a burst of demand on it, or traffic that moved to it: the second one stays (and their slow means
        # show a rise of several replicas only some tens of seconds after it began)
        return WAIT
    if risen < 0.75 * lost:
        return None
    if rises[0][0] >= 0.75 * lost:
        return (f"{rises[0][1].where()} stepped up as much at the same time and stayed up (traffic moved to it: "
                f"a canary promoted?)")
    return (f"{len(rises)} of the service's {len(svc_peers)} other replicas rose at the same time by as much "
            f"together and stayed up (traffic moved to them)")


def _settling(lv: ActivityLevel, ts: float) -> bool:
    """Whether a step is still falling (a replica draining): a step settles at its new level. The
    samples since the last block closed count too (its fast mean): a replica sampled every few
    seconds closes a block with each sample, so its last closed block may be older than its drain."""
    return bool(lv.recent) and min(lv.recent[-1][1], lv.fast) < 0.8 * lv.mean_between(ts - 25.0, ts - 10.0)


def _input_copy(st: GpuState, ref: float) -> bool:
    """Whether the GPU is copying host to device while the job still runs its steps between the
    copies (``INPUT_WORK`` of ``ref``): its input arriving over PCIe, not a copy stage of its own."""
    return st.h2d_since >= 0 and copying(st) and st.level.fast >= INPUT_WORK * ref


def _fed(st: GpuState, ts: float, ref: float) -> bool:
    """Whether the job's input has been arriving over PCIe for ``INPUT_COPY_S``."""
    return _input_copy(st, ref) and ts - st.h2d_since >= INPUT_COPY_S


def _explained(st: GpuState, cfg: DetectorConfig) -> str | None:
    """What makes a low SM activity something other than a slower job, now (None: nothing)."""
    if st.level.idle(st.last_ts):
        return "idle"  # no kernel at all: the idle detector's case
    lv = st.level
    if _input_copy(st, lv.ep_ref or lv.level):
        # a job's input over PCIe, its steps still running between the copies: copies keep utilisation up
        # with little SM work (the real H200 trace u: pageable host-to-device copies at 15 GiB/s read
        # utilisation 40% against SM activity 0.035), so this is no launch-bound phase, as the launch
        # detector says too
        return "input"
    if st.util_slow >= cfg.launch_util and st.util_slow >= SMALL_KERNELS * st.sm_slow and not hung(st, cfg):
        return "launch"  # kernels resident, few SMs working: launch-bound, or another phase of work
    if copy_stage(st):
        return "copy"  # a checkpoint or weights moving over PCIe (beyond what the job moves at work)
    if lv.ep_mode == "step" and _occupied(st, cfg):
        return "busy"
    return None


def _occupied(st: GpuState, cfg: DetectorConfig, relative: bool = False) -> bool:
    """A step of a workload whose activity varies, while the GPU stays as occupied as before the fall
    (utilisation, the time a kernel is resident, at ``OCCUPIED`` of what it was or more) and only SM
    activity fell: lighter kernels, another phase of the same work (an evaluation pass of a training
    job whose steps wander, another mix of requests). Less demand leaves gaps between kernels, and so
    does capacity lost while work waits (a starved host, a slow input): utilisation falls with those.
    Found on an independently written fleet: training pods whose steps wander were judged by their
    steps, and each evaluation was reported (SM activity 0.56 -> 0.24 while utilisation went 86% ->
    76%; 0.78 -> 0.40 at 96%)."""
    lv = st.level
    before = util_at(st, lv.ep_start - lv.ep_lead - _OCCUPIED_BACK_S)
    ref = lv.ep_ref or lv.level
    if before is None or before <= 0 or ref <= 0 or st.util_slow < 0.3 or hung(st, cfg):
        return False
    kept, sm_kept = st.util_slow / before, st.sm_slow / ref
    if relative:
        # the fall's depth, not where its slow mean is now: a fine-tune's 94-s evaluation was reported as
        # its samples came back (its slow mean at 0.71 of its level, no longer "fell", on the way up)
        sm_kept = min(sm_kept, lv.episode_depth())
    if kept < OCCUPIED and not (relative and (1.0 - kept) * LIGHTER <= 1.0 - sm_kept):
        return False  # utilisation fell with SM activity: gaps between kernels, work waited for
    return sm_kept <= 0.7


def throughput(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState],
               svc_peers: Sequence[GpuState], svc_changed: float, pod_unseen: bool = False,
               replicated: bool = False) -> Finding | None:
    """A finding once a fall has lasted its hold (the detector times its own falls: a burst of a
    bursty stall above the end ratio neither ends the fall nor restarts its clock). ``pod_unseen``:
    the GPU's pod has other GPUs at work whose samples are not of this moment (a partition
    delivered late), so whether the whole pod fell cannot be told: it is held as a pod's fall.
    ``replicated``: the GPU's service was seen within ``REPLICATED_S`` with replicas that
    exchange no data (a server's, see ``_awaits_requests``)."""
    lv = st.level
    sm = st.sm
    if sm is None or not st.pids:
        lv.end_episode()
        return None
    if lv.ep_ref:
        if lv.recovered(ts, BAND + (cfg.drop_ratio if lv.ep_mode == "steady" else cfg.step_ratio)):
            # a fall that was reported is the job's rhythm only once it recurs minutes later; sooner, it
            # would excuse the next incident of its depth (level.py ``_like``)
            lv.end_episode(ts, learn_dip=True, dip_max_s=DIP_MAX_S, reported=lv.ep_reported)
            return None
        if ts - lv.ep_start >= cfg.accept_after_s:
            lv.reset(ts)  # lower for this long: the workload's new normal, learned afresh
            return None
        if lv.ep_mode == "unsure" and not lv.ep_reported and not pod_peers and not svc_peers \
                and not st.evidence.serves() and lv.fast < cfg.drop_ratio * lv.level:
            # a step being judged (it must last as long as a steady job's fall) whose samples have
            # since come as bursts at the level between idle waits: the job waits for its input
            # (``_duty_since``), as it would have been judged had the bursts begun before the step
            waited = _duty_since(lv, ts, lv.level)
            found = verdict(st, waited, ts) if waited is not None else None
            if waited is not None and (found is None or found.cause != "demand"):
                lv.start_episode(waited, lv.level, "steady", True, lead=ts - waited, waits=True,
                                 fallen=cfg.drop_ratio)
    elif not _start(st, ts, cfg, _mode(lv, svc_peers), replicated, not svc_peers and not pod_peers):
        return None
    why = _explained(st, cfg)
    if why == "input":
        # host to device: a weights load (judged from the fall's start once it has gone on for a minute),
        # or, past that, the job's input arriving over PCIe slower than it computes
        if ts - st.h2d_since < INPUT_COPY_S:
            return None
        why = None
    if why == "copy":
        # a checkpoint going out: judged from when the copy ends
        st.copy_ts = ts
        lv.start_episode(ts, lv.ep_ref, lv.ep_mode, lv.ep_abrupt, lv.ep_reported, waits=lv.ep_waits,
                         fallen=lv.ep_fallen)
        return None
    if why is not None:
        lv.end_episode(paused=why == "launch")
        return None
    # an anomaly still open from a fall that recovered seconds ago is not this fall's: it closes, and
    # this one is judged on its own (the real H200 trace d: contention 12 s after a reported stall)
    is_open = lv.ep_reported and "throughput_drop" in st.open
    if lv.ep_up >= 0:
        return _finding(st, ts, cfg, pod_peers, svc_peers, False) if is_open else None  # coming back
    lv.add_to_episode(sm)
    pod_wide = False
    if pod_peers:
        if _median([p.sm_rel for p in pod_peers]) >= RECOVERED:
            return None  # only this GPU of the pod fell: the straggler detector's case
        pod_wide = True
    found = verdict(st, lv.ep_start, ts)
    if found is not None and (found.cause == "demand" or _awaits_requests(st, found, replicated)):
        # the server completes fewer requests and none wait, or it sleeps waiting for them: the
        # traffic's fall, not the GPU's
        lv.rebase()
        return None
    if lv.ep_mode != "steady" and not (found is not None and found.host_side):
        why = _demand_explains(st, ts, cfg, svc_peers, svc_changed, found)
        if why == WAIT:
            return _finding(st, ts, cfg, pod_peers, svc_peers, False) if is_open else None
        if why is not None:
            lv.rebase()  # demand, not capacity: its new level is its normal
            return None
    elif lv.ep_mode == "steady" and svc_peers and not is_open \
            and not (found is not None and found.cause in _CPU_STARVED) \
            and replicas(st, svc_peers) and _shared(st, ts, svc_peers, lv.ep_ref - lv.fast):
        # a server's replicas that ran flat out (a batch of requests) are "steady" by their behaviour until
        # the batch ends, and then fall together: the service's demand, which a replica waiting for its
        # requests (asleep, as a job waiting for its input is) cannot tell apart. The pods of one job
        # spread over nodes fall together too, from their input: they exchange data, replicas do not
        # (an independently written fleet's embedding service: 23 false drops in three traces)
        lv.rebase()
        return None
    if is_open:
        if lv.ep_mode == "steady" and _new_cause(st, ts):
            # a new incident inside the reported one: the reported one ends (its anomaly closes) and the
            # new one is judged on its own, from when its cause began
            assert st.new_cause is not None  # what _new_cause saw
            since, ref = st.new_cause[0] - _NEW_CAUSE_S, lv.ep_ref
            lv.end_episode(since, reported=True)
            lv.start_episode(since, ref, "steady", True, lead=ts - since, fallen=cfg.drop_ratio)
            st.drop_cause = st.new_cause = None
            return None
        return _finding(st, ts, cfg, pod_peers, svc_peers, False)
    depth = lv.episode_depth()
    # a host-side cause says what an evaluation pass (a smooth fall) would not: the job waits
    # (a deep fall whose GPU stays as occupied as before waits for nothing: a one-GPU fine-tune's
    # evaluation went to 0.29 of its level at 0.87 of its utilisation, and was reported as a wait
    # after 60 s; a job starved of input leaves its GPU empty between kernels as long as it waits.
    # Not while it copies host to device: copies keep utilisation up with little SM work, and the
    # real H200 trace u's input over PCIe, read every 10 s, was held as an evaluation and lost)
    waits = (depth <= DEEP and not (st.h2d_since < 0 and _occupied(st, cfg))) or lv.ep_waits or lv.bursty() \
        or (found is not None and found.host_side)
    if lv.ep_mode == "step":
        hold = cfg.demand_hold_s
    else:
        hold = cfg.steady_hold_s if waits or not lv.ep_abrupt else cfg.smooth_hold_s
    # a smooth fall whose GPU stays as occupied as before (kernels back to back, fewer SMs at work) waits
    # for nothing: forward passes of an evaluation, a lighter phase of the job's own work. It is judged
    # once it outlasts the dips a job recovers from (an independently written fleet: one-GPU fine-tunes'
    # 100-s evaluations, 0.71 -> 0.26 at 83% utilisation against 96%, and a 16-GPU job's of 155 s).
    # What waits shows it: utilisation falls with SM activity (an input stall, a starved host), or
    # stays pinned on a kernel that does not end (a hang, which ``_occupied`` leaves out). A phase
    # begins at once; a fall that came as a drift over minutes is a job degrading, however occupied
    # (the held-out generator's fine-tunes drift to half their SM activity at the same utilisation)
    # a job waiting for work is timed from when it left its plateau; an evaluation-like fall (smooth,
    # or the whole pod's) from when it was first seen below the ratio, as those holds were set
    unexcused = lv.unexcused(ts)
    if unexcused - (0.0 if hold == cfg.steady_hold_s else lv.ep_lead) < hold:
        return None
    # (asked only once the hold is past; ``relative``: this only lengthens the hold, to DIP_MAX_S, and
    # reads the fall's depth)
    evaluation = lv.ep_abrupt and not waits and _evaluation(st, cfg, ts)
    if evaluation and lv.ep_mode != "step" and unexcused - lv.ep_lead < DIP_MAX_S:
        return None
    # every GPU of the pod at once is what an evaluation or a checkpoint looks like, unless the job's
    # rhythm of falls like this one is known and this one is off it, or the job waits for a CPU (neither
    # an evaluation nor a checkpoint makes it do that): then it is judged as one GPU's fall is
    # (and an evaluation-like one, above, until it outlasts the dips a job recovers from)
    pod_hold = DIP_MAX_S if evaluation else cfg.pod_hold_s
    if (pod_wide or pod_unseen) and lv.ep_mode != "step" and unexcused - lv.ep_lead < pod_hold \
            and not (found is not None and found.cause in _CPU_STARVED) and lv.on_rhythm(lv.ep_start) is not False \
            and not (pod_wide and _pod_asleep(st, found, pod_peers, ts)):
        return None
    if lv.ep_mode != "steady" and _settling(lv, ts):
        return None
    if lv.ep_mode != "steady" and st.evidence.serves() and not (found is not None and found.host_side):
        # the inference server's own figures decide what its SM activity cannot: capacity lost while
        # work waited shows as a queue that grows; the same requests or fewer with no queue are a
        # cheaper mix of requests (shorter prompts, cache hits) or less demand, not a fault
        lv.rebase()
        return None
    # an incident: its way down, learned before the fall was judged, is not the job's work
    lv.forget_since(lv.left_plateau(lv.ep_ref, lv.ep_start, _FORGET_S))
    lv.ep_reported = True
    st.drop_cause = found.cause if found is not None and found.host_side else None
    st.new_cause = None
    return _finding(st, ts, cfg, pod_peers, svc_peers, True, pod_wide, waits)


def _evaluation(st: GpuState, cfg: DetectorConfig, ts: float) -> bool:
    """Whether a fall is as occupied as an evaluation (``_occupied``, relative), now or within the last
    ``EVAL_LATCH_S`` of the same fall. Why: the slow mean of utilisation follows its last samples, and a
    pause as an evaluation ends (a checkpoint written straight after it: three seconds at 6-40%) turned
    the fall into a wait at the moment it was coming back. An independently written fleet's one-GPU
    fine-tunes: 110-s evaluations reported as they ended, at 114-119 s (8 false drops in six sets). A
    fall that goes on as a wait is judged once the latch has run out, from its start as before."""
    if _occupied(st, cfg, relative=True):
        st.occupied_at = (st.level.ep_start, ts)
        return True
    start, at = st.occupied_at
    return start == st.level.ep_start and ts - at <= EVAL_LATCH_S


def _pod_asleep(st: GpuState, found: Verdict | None, pod_peers: Sequence[GpuState], ts: float) -> bool:
    """Whether the whole pod waits for its input: this GPU's feeding thread sleeps since the fall,
    and so do most of its peers', and the fall did not begin as a copy ended.

    Why: every rank of a data-parallel job waits on its own loader when the storage behind them
    is slow, and its main thread sleeps on the loader's queue (an independently written fleet's
    4- to 16-GPU input stalls, at 85% asleep on every rank, waited the 150 s of a pod's pause and
    were found at a median of 154 s). A pod's pauses do not make its ranks sleep: an evaluation
    keeps them busy, and a checkpoint written by one rank leaves the others spinning at a barrier.
    A checkpoint written by every rank comes after its copy to host memory, so a fall that began
    within ``_AFTER_COPY_S`` of a copy keeps the pod's hold (its ranks block writing their shards)."""
    if found is None or not found.asleep or found.since - st.copy_ts < _AFTER_COPY_S:
        return False
    asleep = 0
    for p in pod_peers:
        seen = verdict(p, found.since, ts)
        if seen is not None and seen.asleep:
            asleep += 1
    return 2 * asleep > len(pod_peers)


def _finding(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState],
             svc_peers: Sequence[GpuState], explain: bool, pod_wide: bool = False, waits: bool = False) -> Finding:
    """The throughput-drop finding; its causes only when it is about to open (``explain``)."""
    lv = st.level
    fast, ref = lv.fast, lv.ep_ref
    fall = (1.0 - fast / ref) * 100
    steady = lv.ep_mode == "steady"
    if steady:
        summary = (f"{st.where()}: throughput fell {fall:.0f}% (SM activity {fast:.2f}, working level {ref:.2f}) "
                   f"while the same process kept running")
    else:
        summary = (f"{st.where()}: throughput stepped down {fall:.0f}% (SM activity {ref:.2f} -> {fast:.2f}) "
                   f"while the same process kept running and its service's load did not move")
    if not explain:
        return Finding("throughput_drop", "warning", SM_ACTIVE, summary)
    causes = [f"{_pids(st)} still running since {ts - st.pids_since:.0f} s"]
    stuck = hung(st, cfg)
    if stuck:
        causes.insert(0, f"GPU utilisation {max(st.util_slow * 100, st.util or 0.0):.0f}% (a kernel always resident) "
                         f"while SM activity is {st.sm_slow:.4f}: a kernel that does not end on a sliver of the SMs, "
                         "as a collective waiting for a peer that is gone (NCCL) or a deadlock does; look at the "
                         "job's other ranks and at where its threads wait (py-spy dump)")
    if steady:
        causes.insert(0, f"SM activity {fast:.2f} vs working level {ref:.2f} (-{fall:.0f}%)")
        if lv.steady:
            causes.append(f"a steady workload: on its plateau {lv.plateau_s / 60:.0f} min of the last "
                          f"{len(lv.blocks) * lv.block_s / 60:.0f} min of work, so a sustained fall is lost throughput")
        elif lv.ep_waits and not (lv.tight or lv.calm):
            # judged by its bursts (``_young``, ``_duty_since``), not by a plateau it was never seen to hold
            causes.append("a job, not a server: no request figures and no peer replicas, and its work came in "
                          "bursts at its level between idle waits, as a job's whose input cannot keep up does")
        else:
            # a block of one sample (an agent sampling every 5 s or more) has no variation to measure
            variation = (f"per-sample variation {lv.noise * 100:.0f}%" if lv.noise > 0 else
                         f"its blocks {lv.spread / max(lv.level, 1e-9) * 100:.0f}% apart; one sample per block, "
                         "so no per-sample variation measured")
            causes.append(f"a steady workload: its activity sat on a tight plateau ({variation}) since it reached "
                          "it, so a sustained fall is lost throughput")
        if pod_wide:
            causes.append(f"all {len(pod_peers) + 1} GPUs of the pod fell together (job-wide: input, CPU or a "
                          f"dependency)")
        elif svc_peers:
            fell = sum(1 for p in svc_peers if _fell(p, RECOVERED))
            if fell:
                causes.append(f"{fell} of the service's {len(svc_peers)} other replicas fell too")
        if not lv.ep_abrupt:
            causes.append("it came as a drift over minutes, not at once")
    else:
        causes.insert(0, f"SM activity stepped from {ref:.2f} to {fast:.2f} (-{fall:.0f}%) within half a minute "
                         f"and stayed there: a step, not a drift")
        causes.append("a demand-driven workload (its activity varies), but no change of replicas, no step on "
                      f"{'its ' + str(len(svc_peers)) + ' peer replicas' if svc_peers else 'other replicas'} "
                      "and no such dip before: capacity lost while work waited")
    if stuck:  # the GPU is not waiting for work, and a host thread spinning at 100% waits for the GPU
        return Finding("throughput_drop", "warning", SM_ACTIVE, summary, causes, 0.0)
    if waits and not pod_wide:
        depth = lv.episode_depth()
        causes.append(f"the GPU waits for work: SM activity at {depth * 100:.0f}% of its level"
                      + (f", arriving in bursts (samples vary {lv.episode_variation() * 100:.0f}%)"
                         if depth > DEEP else ""))
    if lv.ep_excused:
        causes.append(f"{lv.ep_excused:.0f} s of it looked like dips the job recovered from before (not counted)")
    if _fed(st, ts, ref):
        causes.append(f"host-to-device copies at {st.pcie / 2**30:.1f} GiB/s for {ts - st.h2d_since:.0f} s while "
                      "the GPU waits: the job's input arrives over PCIe slower than it computes (pageable host "
                      "memory? pin it and copy ahead on a side stream, or keep the data on the GPU)")
    found = verdict(st, lv.ep_start, ts)
    if found is not None and found.cause not in ("none", "no_evidence"):
        causes.append(found.text)
    else:
        if found is not None:
            causes.append(found.text)
        causes.append("likely input- or CPU-bound: the process is alive but the GPU waits for work")
    return Finding("throughput_drop", "warning", SM_ACTIVE, summary, causes, 0.0)


def straggler(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState]) -> Finding | None:
    sm = st.sm
    if sm is None or len(pod_peers) < 2 or not st.pids or ts - st.pids_since < 30.0:
        return None
    now = [p.sm for p in pod_peers if p.sm is not None and abs(ts - p.last_ts) <= _SAME_TIME_S]
    if len(now) < 2:
        return None  # the peers' readings are of another moment
    med = _median(now)
    if med < 0.3 or sm >= cfg.straggler_ratio * med or med - sm < 0.1:
        return _slow_clock(st, ts, cfg, pod_peers, sm, med)
    if _median([p.sm_rel for p in pod_peers]) < POD_FELL:
        # the others are at less than half their own working level: the whole pod fell (its input, a
        # dependency), and this GPU's bursts are out of step with theirs for a moment. The fall is the
        # throughput detector's, and a straggler condition held for a sample ended its judgement each
        # time (an independently written fleet: a 4-GPU job's 10-minute input stall went unreported)
        return None
    lv = st.level
    if lv.established and sm >= cfg.straggler_ratio * lv.level * _median([p.sm_rel for p in pod_peers]):
        # below its peers, but as far below its own level as they are below theirs, or nearly: a rank whose
        # share of the work is lighter (a pipeline stage, an expert with fewer tokens) at its usual offset,
        # in one of the job's own dips. A straggler slows the job: it falls from its own level, and the
        # others wait for it. Found on an independently written fleet: ranks of pipeline-parallel and MoE
        # jobs at 0.79 of their level while their peers were at 0.93 of theirs (12 false stragglers in 12
        # traces; true slow ranks were at 0.45-0.52 of their level, their peers at 0.8)
        return _slow_clock(st, ts, cfg, pod_peers, sm, med)
    if sm < cfg.idle_sm and (st.util is None or st.util < 5.0):
        # no kernel at all while the others work: a synchronous job's ranks would be waiting for this
        # one at their next collective (NCCL spinning, SM activity near zero), not working at 0.3 or
        # more. These GPUs do separate work (a notebook's, a pod running one process per GPU): an idle
        # GPU is the idle detector's case. Found on an independently written fleet: 13 of 16 false
        # stragglers were notebooks' GPUs at 0.00 against 0.3-0.6.
        return None
    causes = [f"SM activity {sm:.2f} vs {med:.2f} median of the pod's other {len(pod_peers)} GPUs"]
    clocks = [p.clock for p in pod_peers if p.clock is not None]
    if st.clock is not None and clocks:
        cmed = _median(clocks)
        causes.append(f"SM clock {st.clock:.0f} MHz vs {cmed:.0f} MHz on its peers")
    summary = f"{st.where()} lags the other GPUs of its job ({sm:.2f} vs {med:.2f} SM activity)"
    return Finding("straggler", "warning", SM_ACTIVE, summary, causes, cfg.straggler_hold_s)


def _slow_clock(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState], sm: float,
                med: float) -> Finding | None:
    """A GPU of a working pod held at a clock well below its peers' with no thermal or power reason (a
    clock lock or applications clocks left set, a degraded board). Every rank of a synchronous job
    does the same work, so the slow one takes longer per step and the others wait for it at each
    collective: its SM activity is then no lower than theirs, often higher (it computes while they
    wait), which the SM test above cannot see. Found missing on an independently written fleet (six
    of eleven stragglers, clocks at 1,110-1,410 MHz against 1,800-1,965). Thermal and power reasons
    are the throttle detectors' findings."""
    clock = st.clock
    if clock is None or sm < 0.3 or med < 0.1 or st.reasons & (THERMAL | POWER | BRAKE):
        return None
    clocks = [p.clock for p in pod_peers if p.clock is not None and abs(ts - p.last_ts) <= _SAME_TIME_S]
    if len(clocks) < 2:
        return None
    cmed = _median(clocks)
    if clock > cfg.clock_drop_ratio * cmed:
        return None
    causes = [f"SM clock {clock:.0f} MHz vs {cmed:.0f} MHz median of the pod's other {len(clocks)} GPUs "
              f"({clock / cmed * 100:.0f}%), clock event reasons {names(st.reasons)}: no thermal or power cause",
              f"SM activity {sm:.2f} vs {med:.2f} on its peers: each step takes it longer, and the others wait "
              "for it at every collective",
              "check for a clock lock or applications clocks left set (nvidia-smi -q -d CLOCK), or a degraded board"]
    summary = f"{st.where()} lags the other GPUs of its job: SM clock {clock:.0f} MHz vs {cmed:.0f} MHz"
    return Finding("straggler", "warning", SM_ACTIVE, summary, causes, 2 * cfg.straggler_hold_s)


def idle_allocated(st: GpuState, cfg: DetectorConfig) -> Finding | None:
    if not st.pod or st.sm is None or st.sm >= cfg.idle_sm:
        return None
    if st.util is not None and st.util >= 5.0:
        return None  # kernels are resident: not idle (a launch-bound loop reads SM activity near zero)
    causes = [f"pod {st.namespace}/{st.pod} holds the GPU", f"SM activity {st.sm:.3f} < {cfg.idle_sm}",
              f"{_pids(st)} idle"] if st.pids else [f"pod {st.namespace}/{st.pod} holds the GPU"]
    summary = f"{st.where()} is allocated but idle for more than {cfg.idle_after_s / 60:.0f} min"
    return Finding("idle_allocated", "info", SM_ACTIVE, summary, causes, cfg.idle_after_s)
