"""Launch-bound work: the GPU is "busy" with kernels its SMs barely run.

Why a finding of its own: GPU utilisation (``DCGM_FI_DEV_GPU_UTIL``) counts the time at
least one kernel is resident, SM activity (``DCGM_FI_PROF_SM_ACTIVE``) the time SMs do
work. A loop of tiny kernels keeps the first up and the second near zero (GPU-FACTS.md:
32% against 0.0005 at about 145,000 kernels a second): the CPU launching kernels is the
bottleneck, not the GPU. Dashboards that show utilisation call such a GPU a third busy;
it is nearly idle. The usual remedies are CUDA Graphs (``torch.cuda.graphs``,
``torch.compile(mode="reduce-overhead")``), fusing small kernels (``torch.compile``, fused
optimizers), and larger batches.

What it is not: an idle GPU (utilisation near zero too), memory-bound kernels (their
warps stay resident, DRAM activity is high) and copy-bound phases (PCIe traffic is high;
copies keep utilisation up with no SM work). Both readings are smoothed over about
``TAU`` seconds because utilisation flickers between samples, and the condition must
hold for minutes (``launch_hold_s``).
"""

from __future__ import annotations

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import GpuState
from telemetry.keys import GPU_UTIL

TAU = 8.0
DRAM_BUSY = 0.3  # DRAM activity above this: memory-bound, not launch-bound
# bytes/s over PCIe (both directions) above this: copying (copy-bound, a checkpoint, weights loading).
# On the H200 a launch-bound loop's doorbells read 180-250 MiB/s, a checkpoint to host memory 1.1-1.6
# GiB/s, host-to-device copies 59 GiB/s (benchmarks/data/h200-labelled.jsonl).
COPYING = 512 * 2**20


def smooth(st: GpuState, ts: float, sm: float, util: float) -> None:
    """Fold one sample into the slow means (called only when both readings exist)."""
    if st.util_slow < 0:
        st.util_slow, st.sm_slow = util, sm
    else:
        dt = max(0.0, ts - st.launch_ts)
        a = dt / (TAU + dt)
        st.util_slow += a * (util - st.util_slow)
        st.sm_slow += a * (sm - st.sm_slow)
    st.launch_ts = ts


def launch_bound(st: GpuState, cfg: DetectorConfig, dram: float | None) -> Finding | None:
    # SM activity from the lower of now and its slow mean: a GPU that just became launch-bound reads
    # near zero at once, and the slow mean would take 15 s to follow it (the hold already asks that
    # every sample agree, so one low sample of a busy GPU starts nothing)
    sm = min(st.sm_slow, st.sm) if st.sm is not None else st.sm_slow
    if not st.pids or st.util_slow < cfg.launch_util or sm * cfg.launch_ratio > st.util_slow:
        return None
    if (dram is not None and dram >= DRAM_BUSY) or st.pcie >= COPYING:
        return None
    ratio = st.util_slow / max(sm, 1e-4)
    causes = [f"GPU utilisation {st.util_slow * 100:.0f}% (a kernel resident) while SM activity is "
              f"{sm:.4f}: {ratio:.0f}x more time with kernels than with SMs working",
              "many tiny kernels: the CPU launching them is the bottleneck, not the GPU",
              "remedies: CUDA Graphs (torch.cuda.graphs, torch.compile mode='reduce-overhead'), fusing small "
              "kernels (torch.compile, fused optimizers), larger batches"]
    if dram is not None:
        causes.append(f"DRAM activity {dram:.2f}: not memory-bound")
    summary = (f"{st.where()} is launch-bound: {st.util_slow * 100:.0f}% utilisation but SM activity "
               f"{sm:.4f}")
    return Finding("launch_bound", "info", GPU_UTIL, summary, causes, cfg.launch_hold_s)
