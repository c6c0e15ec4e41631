"""Hand-made CUPTI probe windows (:class:`telemetry.kernels.KernelWindow`) for the collector's tests.

Why hand-made: each figure the store sums and the API divides is chosen here, so the tests
can state the expected shares, rates and hints exactly. A "training" window is a GEMM-heavy
step (plus a low-occupancy attention kernel and a swarm of tiny elementwise kernels) with
pageable host-to-device copies, many synchronisations and idle gaps: every hint fires on it.
"""

from __future__ import annotations

from telemetry.kernels import CopyStat, KernelStat, KernelWindow
from telemetry.wire import MessageType, stream_headers

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
ATTENTION = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
#: one window of the training loop, ns of kernel time per kernel
TRAIN_NS = {GEMM: 600_000_000, ATTENTION: 150_000_000, ADD: 50_000_000}


def training(ts: float, *, pid: int = 4242, node: str = "node-a", gpu: str = "GPU-k1", namespace: str = "research",
             pod: str = "trainer-0", service: str = "llm", scale: int = 1) -> KernelWindow:
    """One second of a training process; ``scale`` multiplies the GEMM's time (a heavier window)."""
    kernels = (
        KernelStat(GEMM, 1000, TRAIN_NS[GEMM] * scale, 700_000, (132, 1, 1), (384, 1, 1), 168, 213_000, 0.375, 0),
        KernelStat(ATTENTION, 100, TRAIN_NS[ATTENTION], 1_600_000, (64, 16, 1), (128, 1, 1), 255, 180_000, 0.125, 0),
        KernelStat(ADD, 10_000, TRAIN_NS[ADD], 6_000, (1024, 1, 1), (128, 1, 1), 16, 0, 1.0, 9_000),
    )
    copies = (CopyStat("HtoD", "pageable", 100, 200 << 20, 40_000_000),
              CopyStat("HtoD", "pinned", 10, 50 << 20, 5_000_000),
              CopyStat("DtoH", "pinned", 1000, 4000, 2_000_000))
    return KernelWindow(ts=ts, duration_s=1.0, period_s=10.0, pid=pid, command="python train.py", kernels=kernels,
                        copies=copies, memset_calls=20, memset_ns=1_000_000, sync_calls=200, sync_ns=100_000_000,
                        launch_calls=11_100, launch_ns=60_000_000, busy_ns=800_000_000 * scale,
                        idle_ns=200_000_000, idle_gaps=500, records=22_000, dropped_records=0,
                        probe="probe 0.1 cupti 13",
                        node=node, gpu=gpu, namespace=namespace, pod=pod, container="main", service=service)


def headers(node: str = "node-a") -> tuple[tuple[str, bytes], ...]:
    return stream_headers(MessageType.KERNELS, node, "inst-1")
