"""A stand-in for cupti-python's ``cupti.cupti`` module: the GPU side of the kernel probe.

Why a fake (the GPU is one of the two things the tests may fake): CI has no GPU and no
libcupti. It has the module's surface the probe uses (``ActivityKind``,
``runtime_api_trace_cbid``, callback registration, enable/disable, flush, subscribe) and
records with the attribute names of cupti-python 13.4's ``ActivityKernel13``,
``ActivityMemcpy7``, ``ActivityMemset5``, ``ActivitySynchronization2`` and ``ActivityAPI``.
A test "launches" work with :meth:`FakeCupti.kernel` and friends; records are kept only
while their kind is enabled, and delivered on flush, as CUPTI does.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any


class ActivityKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    SYNCHRONIZATION = 38


class runtime_api_trace_cbid(enum.IntEnum):
    INVALID = 0
    cudaGetDevice_v3020 = 17
    cudaLaunchKernel_v7000 = 211
    cudaLaunchKernelExC_v11060 = 430
    cudaStreamSynchronize_v3020 = 131
    SIZE = 600


class FakeCupti:
    ActivityKind = ActivityKind
    runtime_api_trace_cbid = runtime_api_trace_cbid

    def __init__(self, *, subscribers: int = 0, fail_enable: bool = False) -> None:
        self.enabled: set[int] = set()
        self.runtime_cbids: dict[int, int] = {}
        self.buffer: list[Any] = []
        self.requested: Callable[[], tuple[int, int]] | None = None
        self.completed: Callable[[list[Any]], None] | None = None
        self.subscribers = subscribers
        self.fail_enable = fail_enable
        self.registrations = 0

    # ---- the module's surface ----
    def activity_register_callbacks(self, requested: Callable[[], tuple[int, int]],
                                    completed: Callable[[list[Any]], None]) -> None:
        self.requested, self.completed = requested, completed
        self.registrations += 1

    def activity_enable(self, kind: int) -> None:
        if self.fail_enable:
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        self.enabled.add(int(kind))

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(int(kind))

    def activity_enable_runtime_api(self, cbid: int, enable: int) -> None:
        self.runtime_cbids[int(cbid)] = enable

    def activity_flush_all(self, flag: int) -> None:
        if self.buffer and self.completed is not None:
            records, self.buffer = self.buffer, []
            self.completed(records)

    def activity_get_num_dropped_records(self, context: int, stream: int) -> int:
        return 0

    def subscribe(self, callback: Any, userdata: Any) -> int:
        if self.subscribers:
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.subscribers += 1
        return 1

    def unsubscribe(self, handle: int) -> None:
        self.subscribers -= 1

    # ---- the workload ----
    def _add(self, kind: ActivityKind, **fields: Any) -> None:
        if int(kind) in self.enabled:
            self.buffer.append(SimpleNamespace(kind=int(kind), **fields))

    def kernel(self, name: str, start: int, end: int, *, device: int = 0, grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (128, 1, 1), registers: int = 32, static_shared: int = 0,
               dynamic_shared: int = 0) -> None:
        self._add(ActivityKind.CONCURRENT_KERNEL, name=name, start=start, end=end, device_id=device,
                  grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=block[0], block_y=block[1],
                  block_z=block[2], registers_per_thread=registers, static_shared_memory=static_shared,
                  dynamic_shared_memory=dynamic_shared)
        launch = runtime_api_trace_cbid.cudaLaunchKernel_v7000
        if int(ActivityKind.RUNTIME) in self.enabled and self.runtime_cbids.get(int(launch), 1):
            self.buffer.append(SimpleNamespace(kind=int(ActivityKind.RUNTIME), cbid=int(launch),
                                               start=start - 5000, end=start - 1000))

    def memcpy(self, copy_kind: int, src_kind: int, dst_kind: int, nbytes: int, start: int, end: int) -> None:
        self._add(ActivityKind.MEMCPY, copy_kind=copy_kind, src_kind=src_kind, dst_kind=dst_kind, bytes=nbytes,
                  start=start, end=end)

    def memset(self, start: int, end: int) -> None:
        self._add(ActivityKind.MEMSET, start=start, end=end, bytes=64)

    def synchronize(self, start: int, end: int) -> None:
        self._add(ActivityKind.SYNCHRONIZATION, start=start, end=end)

    def api(self, cbid: int, start: int, end: int) -> None:
        if int(ActivityKind.RUNTIME) in self.enabled and self.runtime_cbids.get(cbid, 1):
            self.buffer.append(SimpleNamespace(kind=int(ActivityKind.RUNTIME), cbid=cbid, start=start, end=end))
