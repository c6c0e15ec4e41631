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
from collector.detect.level import PLATEAU
from collector.detect.state import GpuState
from telemetry.bandwidth import DRAM_PEAK_MAX_BYTES_S
from telemetry.keys import GPU_UTIL

TAU = 8.0
DRAM_BUSY = 0.3  # DRAM activity above this: memory-bound, not launch-bound
# bytes/s over PCIe (both directions) above this: copying (copy-bound, a checkpoint, weights loading).
# On the H200 a launch-bound loop's doorbells read 180-250 MiB/s, a checkpoint to host memory 1.1-1.6
# GiB/s, host-to-device copies 59 GiB/s (benchmarks/data/h200-labelled.jsonl).
COPYING = 512 * 2**20
# what a launch-bound finding's own copies may read: a loop of tiny steps moves its small inputs and
# outputs each step (hundreds of MiB/s besides the doorbells); a copy-bound phase moves bulk data at
# GiB/s (the held-out ETL copies at 12 GB/s; pageable staging at 15 GiB/s, real trace u)
BULK = 2 * 2**30
HIST_EVERY = 5.0  # seconds between kept utilisation means
PINNED = 0.95  # GPU utilisation (ratio, slow mean) at or above this: a kernel always resident, no launch gaps
# a pinned GPU whose SM activity (its slow mean) is below a tenth of its utilisation: stuck, one kernel
# spinning on a few SMs (the real hangs read 22-132 times). At 4 times (launch_ratio's value until
# 2026-12-06) the ranks of a pod waiting at a barrier while one writes a checkpoint (NCCL spinning on a
# few dozen SMs, utilisation 100%, SM activity 0.14-0.17) read as hung, and were judged as a lost
# throughput at once; they are a pause of the job (docs/benchmarks.md, round 21). What it costs: the
# slow mean takes seconds longer to fall to a tenth (the real trace r's hang, sampled every 5 s, is
# found 10 s later); read from the newest sample instead, 44 more false drops on an independent fleet
HANG_RATIO = 10.0
# share of the PCIe bytes that DRAM activity must account for before the traffic is a copy: a copy
# lands in device memory (H200 copies and checkpoints: 0.88-0.94 of their bytes at the H200's peak);
# six kernels spinning in a hang read 2.4 GiB/s over PCIe with DRAM activity 4e-6, a hundredth
# (real trace r, docs/gpu-validation.md)
LANDS = 0.25
# seconds over which the PCIe traffic of a workload at its working level is learned (``learn_traffic``)
WORK_TAU = 60.0
TRAFFIC_EVERY = 5.0
ONE_WAY = 4.0  # a copy's main direction carries this many times the other's bytes, or more


def hung(st: GpuState, cfg: DetectorConfig) -> bool:
    """A kernel always resident while the SMs barely work: what a hang looks like, not launch-bound work.
    Utilisation now or its slow mean: the mean takes 15 s to climb to a hang's 100%, and a fall is
    not excused as launch-bound meanwhile."""
    util = max(st.util_slow, (st.util or 0.0) / 100.0)
    if util < PINNED or util < HANG_RATIO * st.sm_slow:
        return False
    return (st.dram is None or st.dram < DRAM_BUSY) and not copying(st)  # not memory- or copy-bound: stuck


def copying(st: GpuState) -> bool:
    """PCIe traffic of a copy: above ``COPYING`` and, where DRAM activity is read, landing in
    device memory (a hang's or a launch loop's doorbells and semaphore reads do not)."""
    if st.pcie < COPYING:
        return False
    return st.dram is None or st.dram * DRAM_PEAK_MAX_BYTES_S >= LANDS * st.pcie


def learn_traffic(st: GpuState, ts: float) -> None:
    """Learn the PCIe traffic the workload moves while it works at its level (``pcie_work``).

    Why: a job spread over nodes moves its collectives over PCIe to the NIC (GPUDirect RDMA), and
    one that streams its input moves that; DCGM counts both as PCIe bytes, gigabytes a second all
    the time. Measured against ``COPYING`` alone, such a job's every fall was a "copy" (a
    checkpoint going out) and was never judged: a 16-GPU job's input stall of 11 minutes on an
    independently written fleet (SM activity 0.68 -> 0.15, its feeding threads asleep, 2-3 GB/s
    still moving) went unreported. A copy stage moves what the working job did not."""
    dt = ts - st.pcie_ts
    if dt < TRAFFIC_EVERY:
        return  # (a minute's mean: a sample in five seconds is plenty)
    lv = st.level
    sm = st.sm
    if lv.ep_ref or sm is None or lv.level <= 0.0 or sm < PLATEAU * lv.level:
        return
    st.pcie_ts = ts
    if st.pcie_work < 0.0:
        st.pcie_work = st.pcie
    else:
        st.pcie_work += min(dt, WORK_TAU) / WORK_TAU * (st.pcie - st.pcie_work)


def copy_stage(st: GpuState) -> bool:
    """A copy of the workload's own (a checkpoint, weights): ``copying``, and either ``COPYING``
    more than the traffic it moved at work or one way (``ONE_WAY``). A checkpoint goes device to
    host and a weights load host to device, while a collective over RDMA sends as much as it
    receives: a job spread over nodes writing a sharded checkpoint moved 1.5-4 GB/s out against
    30 GB/s both ways at work (an independently written fleet), and was no copy by its volume."""
    if not copying(st):
        return False
    rx = st.pcie_rx
    tx = st.pcie - rx
    return st.pcie >= max(0.0, st.pcie_work) + COPYING or max(tx, rx) >= ONE_WAY * min(tx, rx)


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
    hist = st.util_hist
    if not hist or ts - hist[-1][0] >= HIST_EVERY:
        hist.append((ts, st.util_slow))


def util_at(st: GpuState, ts: float) -> float | None:
    """The slow mean of utilisation at about ``ts`` (the last kept at or before it), if kept."""
    found = None
    for t, u in st.util_hist:
        if t > ts:
            break
        found = u
    return found


def launch_bound(st: GpuState, cfg: DetectorConfig, dram: float | None) -> Finding | None:
    # SM activity from the lower of now and its slow mean: a GPU that just became launch-bound reads
    # near zero at once, and the slow mean would take 15 s to follow it (the hold already asks that
    # every sample agree, so one low sample of a busy GPU starts nothing)
    sm = min(st.sm_slow, st.sm) if st.sm is not None else st.sm_slow
    if not st.pids or st.util_slow < cfg.launch_util or sm * cfg.launch_ratio > st.util_slow or st.util_slow >= PINNED:
        return None
    if (dram is not None and dram >= DRAM_BUSY) or st.pcie >= BULK:
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
