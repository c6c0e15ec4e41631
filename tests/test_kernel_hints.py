"""The kernel hints (collector/kernel_hints.py): each fires on its figure, names a remedy, stays quiet below it.

Why pure tests: the hints are arithmetic on sums; each threshold is tested on both sides so a
changed constant shows here, not as a surprise on the web page.
"""

from __future__ import annotations

from dataclasses import replace

from collector import kernel_hints as H
from collector.kernel_hints import CopyFigure, Figures, KernelFigure, Phase

QUIET = Figures(recorded_s=10.0, calls=10_000, short_calls=100, busy_ns=9_500_000_000, idle_ns=500_000_000,
                idle_gaps=50, sync_calls=20, sync_ns=1_000_000, launch_calls=10_000,
                kernels=[KernelFigure("gemm", 5000, 9_000_000_000, 0.9, 0.5, 128, 0, (256, 1, 1)),
                         KernelFigure("tiny", 5000, 50_000_000, 0.005, 0.1, 255, 0, (32, 1, 1))],
                copies=[CopyFigure("HtoD", "pinned", 100, 1 << 30, 100_000_000),
                        CopyFigure("HtoD", "pageable", 10, 1000, 10_000)])


def kinds(f: Figures) -> list[str]:
    return [h.kind for h in H.hints(f)]


def test_a_healthy_service_gets_no_hint() -> None:
    assert H.hints(QUIET) == []


def test_fusion_needs_short_kernels_in_numbers_and_idle_gaps() -> None:
    busy = replace(QUIET, calls=100_000, short_calls=80_000, idle_gaps=2_000, short=[("add", 60_000), ("mul", 20_000)])
    (hint,) = H.hints(busy)
    assert hint.kind == "kernel_fusion" and hint.severity == "info" and hint.kernels == ("add", "mul")
    assert "80 % of the kernel launches (8,000 per second of recording) ran under 10 µs" in hint.message
    assert "200 idle gaps per second" in hint.message and "CUDA Graphs" in hint.message
    assert "torch.compile" in hint.message
    assert H.hints(replace(busy, idle_gaps=999)) == []  # 99.9 gaps per second: the GPU keeps up
    assert H.hints(replace(busy, short_calls=49_000)) == []  # under half the launches
    assert H.hints(replace(busy, recorded_s=100.0, idle_gaps=20_000)) == []  # 800 short calls per second
    idle = replace(busy, busy_ns=7_000_000_000, idle_ns=3_000_000_000)
    assert next((h.kind, h.severity) for h in H.hints(idle)) == ("kernel_fusion", "warning")


def test_low_occupancy_needs_a_real_share_of_the_time() -> None:
    slow = replace(QUIET, kernels=[KernelFigure("flash_fwd", 100, 3_000_000_000, 0.3, 0.125, 255, 180_000, (128, 1, 1)),
                                   KernelFigure("gemm", 5000, 6_000_000_000, 0.6, 0.2, 168, 0, (384, 1, 1)),
                                   KernelFigure("small", 10, 40_000_000, 0.04, 0.05, 255, 0, (32, 1, 1))])
    hints = H.hints(slow)
    assert [(h.kind, h.severity, h.kernels) for h in hints] == [
        ("low_occupancy", "warning", ("flash_fwd",)), ("low_occupancy", "warning", ("gemm",))]
    assert "flash_fwd takes 30 % of the kernel time at 12 % theoretical occupancy" in hints[0].message
    assert "128 threads per block, 255 registers per thread, 180,000 bytes of shared memory" in hints[0].message
    assert "__launch_bounds__" in hints[0].message and "larger batch" in hints[0].message
    exactly = replace(slow, kernels=[replace(slow.kernels[0], occupancy=0.25), replace(slow.kernels[1], share=0.049)])
    assert H.hints(exactly) == []
    small = replace(slow, kernels=[replace(slow.kernels[0], share=0.1)])
    assert [(h.kind, h.severity) for h in H.hints(small)] == [("low_occupancy", "info")]
    unknown = replace(slow, kernels=[replace(slow.kernels[0], occupancy=None)])
    assert H.hints(unknown) == []


def test_pageable_host_to_device_copies() -> None:
    paged = replace(QUIET, copies=[CopyFigure("HtoD", "pinned", 100, 300 << 20, 20_000_000),
                                   CopyFigure("HtoD", "pageable", 400, 700 << 20, 800_000_000),
                                   CopyFigure("DtoH", "pageable", 10_000, 10 << 30, 1)])
    (hint,) = H.hints(paged)
    assert (hint.kind, hint.severity, hint.value) == ("pageable_copies", "warning", 0.7)
    assert "70 % of the host-to-device bytes (73.4 MB per second of recording, 400 copies)" in hint.message
    assert "8.0 % of the recorded time" in hint.message and "pin_memory=True" in hint.message
    assert [h.severity for h in H.hints(replace(paged, recorded_s=100.0))] == ["info"]
    few = replace(paged, copies=[paged.copies[0], replace(paged.copies[1], bytes=(1 << 20) - 1)])
    assert H.hints(few) == []  # under 1 MiB: scalars and masks
    minor = replace(paged, copies=[replace(paged.copies[0], bytes=10 << 30), paged.copies[1]])
    assert H.hints(minor) == []  # 6 % of the host-to-device bytes


def test_synchronisations_matter_when_the_gpu_then_idles() -> None:
    syncing = replace(QUIET, sync_calls=5_000, sync_ns=2_000_000_000, busy_ns=8_500_000_000, idle_ns=1_500_000_000)
    (hint,) = H.hints(syncing)
    assert (hint.kind, hint.severity, hint.value) == ("sync_heavy", "info", 500.0)
    assert "500 synchronisations per second of recording (400 µs each on average)" in hint.message
    assert "15 % of the time between kernels" in hint.message and ".item()" in hint.message
    assert H.hints(replace(syncing, busy_ns=9_500_000_000, idle_ns=500_000_000)) == []  # the GPU stays busy
    assert H.hints(replace(syncing, sync_calls=499)) == []  # 49.9 per second


def test_an_idle_gpu_overall_or_in_a_phase() -> None:
    idle = replace(QUIET, busy_ns=5_000_000_000, idle_ns=5_000_000_000)
    (hint,) = H.hints(idle)
    assert (hint.kind, hint.severity, hint.value) == ("idle_gpu", "warning", 0.5)
    assert hint.message.startswith("The GPU sat idle 50 % of the time between its kernels: it waits on the host")
    assert "num_workers" in hint.message
    assert [h.severity for h in H.hints(replace(idle, busy_ns=7_000_000_000, idle_ns=3_000_000_000))] == ["info"]
    phases = [Phase(1_764_489_600.0 + 300 * i, 5.0, 4_000_000_000, 1_000_000_000) for i in range(11)]
    phases.append(Phase(1_764_492_900.0, 5.0, 2_000_000_000, 3_000_000_000))  # an evaluation phase
    phased = replace(QUIET, phases=phases)
    (hint,) = H.hints(phased)
    assert (hint.kind, hint.severity) == ("idle_gpu", "info")
    assert "5.0 % of the time between its kernels overall, but 40 % or more in 1 of the 12 time buckets" in hint.message
    assert "(worst: 60 %, in the one from 2025-11-30T08:55:00+00:00)" in hint.message
    short = replace(QUIET, phases=[replace(phases[-1], recorded_s=0.5)])
    assert H.hints(short) == []  # half a second of recording says too little


def test_warnings_come_first_and_no_kernels_means_no_idle_figures() -> None:
    both = replace(QUIET, busy_ns=5_000_000_000, idle_ns=5_000_000_000,
                   kernels=[KernelFigure("k", 1, 1, 0.1, 0.1)])
    assert [(h.kind, h.severity) for h in H.hints(both)] == [("idle_gpu", "warning"), ("low_occupancy", "info")]
    empty = Figures(recorded_s=0.0)
    assert empty.idle_share is None and H.hints(empty) == []
