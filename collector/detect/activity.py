"""SM-activity detectors: throughput drop, straggler, idle allocated GPU.

Why peers matter: SM activity moves with load all day (traffic cycles, evaluation
pauses, checkpoints), so a fall against a GPU's own baseline alone is not news. It is
news when the same process is still there and the GPUs that should move with it (the
other GPUs of its pod, the other replicas of its service) did not fall. A drop they all
share must last ``sync_hold_s`` before it counts, which is longer than an evaluation
pause or a trough of a load cycle. Inside a multi-GPU pod, one GPU behind the others
is a straggler; a single-GPU pod behind its service's replicas has a throughput drop.
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import SM_ACTIVE, GpuState


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def _pids(st: GpuState) -> str:
    pids = sorted(st.pids)
    text = ", ".join(str(p) for p in pids[:3]) + (", ..." if len(pids) > 3 else "")
    return f"process{'es' if len(pids) > 1 else ''} {text}"


def throughput(st: GpuState, ts: float, cfg: DetectorConfig,
               pod_peers: Sequence[GpuState], svc_peers: Sequence[GpuState]) -> Finding | None:
    sm = st.sm
    if sm is None or sm < 0.05 or not st.pids or ts - st.pids_since < cfg.warmup_s:
        return None  # near zero is idleness, the idle detector's case (after its own, longer wait)
    base = st.sm_base.current(ts)
    level = base.level
    if base.count < 60 or level < 0.25 or level - sm < 0.1:
        return None
    rel = sm / level
    causes = [f"SM activity {sm:.2f} vs baseline {level:.2f} ({(rel - 1) * 100:+.0f}%)",
              f"{_pids(st)} still running since {ts - st.pids_since:.0f} s"]
    summary = ""
    own_drop = sm < cfg.drop_ratio * level and sm < level - 3 * max(base.spread, 0.02)
    if pod_peers:
        if not own_drop:
            return None
        pod_med = _median([p.sm_rel for p in pod_peers])
        if pod_med >= 0.75:
            return None  # only this GPU of the pod fell: the straggler detector's case
        causes.append(f"all {len(pod_peers) + 1} GPUs of the pod fell together (job-wide: input, CPU or a dependency)")
        hold = cfg.sync_hold_s
    elif svc_peers:
        med = _median([p.sm_rel for p in svc_peers])
        expected = level * med  # where the replicas' shared load says this GPU should be now
        if sm < cfg.drop_ratio * expected and expected - sm > 0.1:
            causes.append(f"{len(svc_peers)} other replicas of the service run at {med * 100:.0f}% of their "
                          f"baselines; this one at {rel * 100:.0f}%")
            hold = cfg.drop_hold_s
            rel = sm / expected
            summary = (f"{st.where()}: throughput {(1 - rel) * 100:.0f}% below what its service's load implies "
                       f"(SM activity {sm:.2f}, replicas suggest {expected:.2f}) while the same process kept running")
        elif own_drop and med < 0.75:
            causes.append(f"the service's {len(svc_peers)} other replicas fell too (median {med * 100:.0f}%)")
            hold = cfg.sync_hold_s
        else:
            return None
    elif own_drop:
        hold = cfg.alone_hold_s
    else:
        return None
    causes.append("likely input- or CPU-bound: the process is alive but the GPU waits for work")
    if not summary:
        summary = (f"{st.where()}: throughput fell {(1 - rel) * 100:.0f}% (SM activity {sm:.2f}, baseline {level:.2f}) "
               f"while the same process kept running")
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
    causes = [f"pod {st.namespace}/{st.pod} holds the GPU", f"SM activity {st.sm:.3f} < {cfg.idle_sm}",
              f"{_pids(st)} idle"] if st.pids else [f"pod {st.namespace}/{st.pod} holds the GPU"]
    summary = f"{st.where()} is allocated but idle for more than {cfg.idle_after_s / 60:.0f} min"
    return Finding("idle_allocated", "info", SM_ACTIVE, summary, causes, cfg.idle_after_s)
