"""Launch-bound work: the GPU is "busy" with kernels its SMs barely run.

Why a finding of its own: GPU utilisation (``DCGM_FI_DEV_GPU_UTIL``) counts the time at
least one kernel is resident, SM activity (``DCGM_FI_PROF_SM_ACTIVE``) the time SMs do
work. A loop of tiny kernels keeps the first up and the second near zero (GPU-FACTS.md:
32% against 0.0005 at about 145,000 kernels a second): the CPU launching kernels is the
bottleneck, not the GPU. Dashboards that show utilisation call such a GPU a third busy;
it is nearly idle. The usual remedies are CUDA Graphs (``torch.cuda.graphs``,
``torch.compile(mode="reduce-overhead")``), fusing small kernels (``torch.compile``, fused
optimizers), and larger batches.

What it is not: a GPU whose utilisation is pinned at 100% (``PINNED``). Launch-bound work leaves
the GPU waiting between kernels for the CPU to launch the next, and those waits are what keep
utilisation below 100% (the H200's launch loops read 18-34%). Utilisation that never drops
means a kernel is always resident: the CPU is not what the GPU waits for. With SM activity
near zero that is one kernel that does not end on a sliver of the SMs, a collective waiting
for a dead peer (NCCL) or a deadlock (the real H200 trace q: 100% against 0.0076, one SM of
132), and it is judged as the job's lost throughput (``collector.detect.activity``).
Nor is it an idle GPU (utilisation near zero too), memory-bound kernels (their
warps stay resident, DRAM activity is high) and copy-bound phases (PCIe traffic is high;
copies keep utilisation up with no SM work). Both readings are smoothed over about
``TAU`` seconds because utilisation flickers between samples, and the condition must
hold for minutes (``launch_hold_s``).
"""

from __future__ import annotations

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import GpuState
from telemetry.bandwidth import DRAM_PEAK_MAX_BYTES_S
from telemetry.keys import GPU_UTIL

TAU = 8.0
DRAM_BUSY = 0.3  # DRAM activity above this: memory-bound, not launch-bound
# bytes/s over PCIe (both directions) above this: copying (copy-bound, a checkpoint, weights loading).
# On the H200 a launch-bound loop's doorbells read 180-250 MiB/s, a checkpoint to host memory 1.1-1.6
# GiB/s, host-to-device copies 59 GiB/s (benchmarks/data/h200-labelled.jsonl).
COPYING = 512 * 2**20
PINNED = 0.95  # GPU utilisation (ratio, slow mean) at or above this: a kernel always resident, no launch gaps
# share of the PCIe bytes that DRAM activity must account for before the traffic is a copy: a copy
# lands in device memory (H200 copies and checkpoints: 0.88-0.94 of their bytes at the H200's peak);
# six kernels spinning in a hang read 2.4 GiB/s over PCIe with DRAM activity 4e-6, a hundredth
# (real trace r, docs/gpu-validation.md)
LANDS = 0.25


def hung(st: GpuState, cfg: DetectorConfig) -> bool:
    """A kernel always resident while the SMs barely work: what a hang looks like, not launch-bound work.
    Utilisation now or its slow mean: the mean takes 15 s to climb to a hang's 100%, and a fall is
    not excused as launch-bound meanwhile."""
    util = max(st.util_slow, (st.util or 0.0) / 100.0)
    if util < PINNED or util < cfg.launch_ratio * st.sm_slow:
        return False
    return (st.dram is None or st.dram < DRAM_BUSY) and not copying(st)  # not memory- or copy-bound: stuck


def copying(st: GpuState) -> bool:
    """PCIe traffic of a copy: above ``COPYING`` and, where DRAM activity is read, landing in
    device memory (a hang's or a launch loop's doorbells and semaphore reads do not)."""
    if st.pcie < COPYING:
        return False
    return st.dram is None or st.dram * DRAM_PEAK_MAX_BYTES_S >= LANDS * st.pcie


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
    if not st.pids or st.util_slow < cfg.launch_util or sm * cfg.launch_ratio > st.util_slow or st.util_slow >= PINNED:
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
