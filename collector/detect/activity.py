"""SM-activity detectors: throughput drop, straggler, idle allocated GPU.

Why the kind of workload decides what a fall means (collector/detect/level.py says how it
is told from behaviour):

* A **steady** workload (training, batch) does the same work all the time, so a fall
  well below its working level with the same process alive is lost throughput, whether
  it comes as a step or as a drift over minutes, and whether one GPU or the whole job
  fell (a job-wide fall is input, CPU or a dependency). It must outlast a dip: 60 s for
  one GPU, 150 s when every GPU of a multi-GPU pod fell together (evaluation and
  checkpoints pause the whole job at once), and longer still when the job has already
  recovered from dips this deep and the fall comes on the job's rhythm (level.py).
* A **demand-driven** workload (serving) moves with its traffic, which differs between
  replicas (sticky sessions, cache-aware routing, regions) and over the day, so lower
  activity than before or than its peers is not by itself a fault. It is evidence of
  lost capacity only as a *step*: a minute and more on a line (not just after a burst of
  demand began), then a fall of 35% from it within half a minute that stays; and only
  when nothing explains it as demand: its activity did not go to near zero (a drained
  replica), the service's replicas did not change just then (an autoscaler or a rollout
  moves load), the other replicas did not step down with it (traffic moved away from all
  of them), and no other replica stepped up by as much at that moment (traffic moved to
  it). Like a steady job's, it must outlast the dips this replica already recovered
  from. Demand signals (request rates, queue depths), once they exist, are one more
  explanation of the same kind, or their absence one more piece of evidence:
  ``_demand_explains`` is where they plug in.

Inside a multi-GPU pod one GPU behind the others is a straggler. An activity near zero
is idleness, the idle detector's case (after its own, longer wait).
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.level import IDLE, ActivityLevel
from collector.detect.state import SM_ACTIVE, GpuState

RECOVERED = 0.75  # a peer (or a pod's other GPUs) above this fraction of its level has not fallen
BAND = 0.05  # a fall ends when activity is back this far above the ratio that started it
DIP_MAX_S = 300.0  # falls that recover within this long are remembered as the job's dips
_CHANGE_WINDOW_S = 180.0
_STEP_S = 30.0  # a step falls within this long


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
    no other replicas in its service that has held a tight plateau for a minute is taken for
    a steady job (a lone training process on a bare host: a fall is reported within 90 s);
    any other is judged by the stricter of both rules (``unsure``: only a step counts, and
    it must last as long as a steady job's fall)."""
    if lv.steady is not None:
        return "steady" if lv.steady else "step"
    return "steady" if lv.tight and not svc_peers else "unsure"


def _start(lv: ActivityLevel, ts: float, cfg: DetectorConfig, mode: str) -> bool:
    fast = lv.fast
    if not lv.established or fast < IDLE:
        return False
    if mode == "steady":
        ref = lv.level
        if fast < cfg.drop_ratio * ref and ref - fast >= max(0.1, 4.0 * lv.spread) \
                and lv.high_within(ts, _STEP_S) >= cfg.drop_ratio * ref:  # falling to here, not rising from idle
            lv.start_episode(ts, ref, "steady")
            return True
        return False
    ref, iqr, rise = lv.step_anchor()
    fall = ref - fast
    if ref > 0 and fast < cfg.step_ratio * ref and fall >= 0.1 and iqr <= 0.25 * fall \
            and rise < 0.5 * fall and lv.high_within(ts, _STEP_S) >= ref - 0.5 * fall:
        # on a line for two minutes, not just after a burst began, and still up half a minute ago
        lv.start_episode(ts, ref, mode)
        return True
    return False


def _fell(p: GpuState, ratio: float) -> bool:
    """Whether a peer is in a fall of its own, or just stepped below ``ratio`` of where it was."""
    lv = p.level
    if lv.ep_ref:
        return True
    anchor = lv.step_anchor()[0]
    return anchor > 0 and lv.fast < ratio * anchor


def _rose(p: GpuState) -> float:
    """How far a peer now sits above where it just was (0 without an anchor)."""
    anchor = p.level.step_anchor()[0]
    return p.level.fast - anchor if anchor > 0 else 0.0


def _demand_explains(st: GpuState, cfg: DetectorConfig, svc_peers: Sequence[GpuState]) -> str | None:
    """Why a step of a demand-driven workload may be demand, not lost capacity (None: nothing does)."""
    lv = st.level
    if lv.fast < 2 * IDLE:
        return "its activity went to near zero: drained or no longer routed to, not slower"
    if svc_peers:
        fell = sum(1 for p in svc_peers if _fell(p, cfg.step_ratio))
        if fell >= max(1, len(svc_peers) // 2):
            return f"{fell} of the service's {len(svc_peers)} other replicas stepped down too (traffic moved)"
        lost = lv.ep_ref - lv.fast
        rose = next((p for p in svc_peers if _rose(p) >= 0.5 * lost), None)
        if rose is not None:
            return f"{rose.where()} stepped up as much at the same time (traffic moved to it: a canary promoted?)"
    return None


def throughput(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState],
               svc_peers: Sequence[GpuState], svc_changed: float) -> Finding | None:
    lv = st.level
    if st.sm is None or not st.pids:
        lv.end_episode()
        return None
    fast = lv.fast
    if lv.ep_ref:
        if fast < IDLE:
            lv.end_episode()  # fell to idleness: the idle detector's case
            return None
        if fast >= (BAND + (cfg.drop_ratio if lv.ep_mode == "steady" else cfg.step_ratio)) * lv.ep_ref:
            lv.end_episode(ts, learn_dip=True, dip_max_s=DIP_MAX_S)
            return None
        if ts - lv.ep_start >= cfg.accept_after_s:
            lv.reset(ts)  # lower for this long: the workload's new normal, learned afresh
            return None
    elif not _start(lv, ts, cfg, _mode(lv, svc_peers)):
        return None
    lv.ep_sum += fast
    lv.ep_n += 1
    ref = lv.ep_ref
    pod_wide = False
    if pod_peers:
        pod_med = _median([p.sm_rel for p in pod_peers])
        if pod_med >= RECOVERED:
            return None  # only this GPU of the pod fell: the straggler detector's case
        pod_wide = True
    if svc_peers and svc_changed >= lv.ep_start - _CHANGE_WINDOW_S:
        lv.end_episode()  # the service's replicas changed just before: its load moved (autoscaling, rollout)
        return None
    depth = lv.episode_depth()
    fall = (1.0 - fast / ref) * 100
    causes = [f"{_pids(st)} still running since {ts - st.pids_since:.0f} s"]
    if lv.ep_mode == "steady":
        hold = cfg.pod_hold_s if pod_wide else cfg.steady_hold_s
        causes.insert(0, f"SM activity {fast:.2f} vs working level {ref:.2f} (-{fall:.0f}%)")
        causes.append(f"a steady workload: on its plateau {lv.plateau_blocks * 10 / 60:.0f} min of the last "
                      f"{len(lv.blocks) * 10 / 60:.0f} min of work, so a sustained fall is lost throughput")
        if pod_wide:
            causes.append(f"all {len(pod_peers) + 1} GPUs of the pod fell together (job-wide: input, CPU or a "
                          f"dependency)")
        elif svc_peers:
            fell = sum(1 for p in svc_peers if _fell(p, RECOVERED))
            if fell:
                causes.append(f"{fell} of the service's {len(svc_peers)} other replicas fell too")
        summary = (f"{st.where()}: throughput fell {fall:.0f}% (SM activity {fast:.2f}, working level {ref:.2f}) "
                   f"while the same process kept running")
    else:
        why = _demand_explains(st, cfg, svc_peers)
        if why is not None:
            lv.end_episode()  # demand, not capacity: nothing to judge
            return None
        hold = cfg.demand_hold_s if lv.ep_mode == "step" else (cfg.pod_hold_s if pod_wide else cfg.steady_hold_s)
        causes.insert(0, f"SM activity stepped from {ref:.2f} to {fast:.2f} (-{fall:.0f}%) within half a minute "
                         f"and stayed there: a step, not a drift")
        causes.append("a demand-driven workload (its activity varies), but no change of replicas, no step on "
                      f"{'its ' + str(len(svc_peers)) + ' peer replicas' if svc_peers else 'other replicas'} "
                      "and no such dip before: capacity lost while work waited")
        summary = (f"{st.where()}: throughput stepped down {fall:.0f}% (SM activity {ref:.2f} -> {fast:.2f}) "
                   f"while the same process kept running and its service's load did not move")
    allowance = lv.dip_allowance(depth)
    if allowance > hold:
        hold = allowance
        causes.append(f"it recovered from dips this deep before, so this one had to outlast {allowance:.0f} s")
    causes.append("likely input- or CPU-bound: the process is alive but the GPU waits for work")
    return Finding("throughput_drop", "warning", SM_ACTIVE, summary, causes, hold)


def straggler(st: GpuState, ts: float, cfg: DetectorConfig, pod_peers: Sequence[GpuState]) -> Finding | None:
    sm = st.sm
    if sm is None or len(pod_peers) < 2 or not st.pids or ts - st.pids_since < 30.0:
        return None
    med = _median([p.sm for p in pod_peers if p.sm is not None])
    if med < 0.3 or sm >= cfg.straggler_ratio * med or med - sm < 0.1:
        return None
    causes = [f"SM activity {sm:.2f} vs {med:.2f} median of the pod's other {len(pod_peers)} GPUs"]
    clocks = [p.clock for p in pod_peers if p.clock is not None]
    if st.clock is not None and clocks:
        cmed = _median(clocks)
        causes.append(f"SM clock {st.clock:.0f} MHz vs {cmed:.0f} MHz on its peers")
    summary = f"{st.where()} lags the other GPUs of its job ({sm:.2f} vs {med:.2f} SM activity)"
    return Finding("straggler", "warning", SM_ACTIVE, summary, causes, cfg.straggler_hold_s)


def idle_allocated(st: GpuState, cfg: DetectorConfig) -> Finding | None:
    if not st.pod or st.sm is None or st.sm >= cfg.idle_sm:
        return None
    if st.util is not None and st.util >= 5.0:
        return None  # kernels are resident: not idle (a launch-bound loop reads SM activity near zero)
    causes = [f"pod {st.namespace}/{st.pod} holds the GPU", f"SM activity {st.sm:.3f} < {cfg.idle_sm}",
              f"{_pids(st)} idle"] if st.pids else [f"pod {st.namespace}/{st.pod} holds the GPU"]
    summary = f"{st.where()} is allocated but idle for more than {cfg.idle_after_s / 60:.0f} min"
    return Finding("idle_allocated", "info", SM_ACTIVE, summary, causes, cfg.idle_after_s)
