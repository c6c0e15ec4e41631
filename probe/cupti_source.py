"""The CUPTI side of the probe: switch activity recording on and off, copy records out.

Why so little here: everything CUPTI-specific (cupti-python's module, its enums, the record
fields, the runtime API callback ids) sits in this one class, so the rest of the probe is
plain Python tested without a GPU, and a test can hand in a fake ``cupti`` module.

What is recorded (issue 15): concurrent kernels (``CONCURRENT_KERNEL`` does not serialise
kernels, unlike ``KERNEL``), memcpy, memset, synchronisation, and runtime API records for
the launch calls alone (``activity_enable_runtime_api`` for the launch callback ids, so a
loop's other API calls do not add records). CUPTI hands completed buffers to
:meth:`_completed`, on its own thread or in :meth:`stop`'s flush; each record's few fields
go to the :class:`~probe.aggregate.WindowAggregator` of the window under way.

cupti-python wheels are built per CUDA major version (13.x for CUDA 13 drivers, 12.x for
CUDA 12): :func:`load` imports whichever is installed and says which, and any import or
driver failure is returned as a reason, never raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from probe.aggregate import WindowAggregator

BUFFER_BYTES = 8 << 20
_LAUNCH_WORDS = ("Launch",)


def load() -> tuple[Any, str]:
    """cupti-python's ``cupti`` module and its version, or (None, why it could not load)."""
    try:
        from cupti import cupti  # type: ignore[import-not-found,unused-ignore]
    except Exception as exc:  # noqa: BLE001 - a missing wheel, a missing libcupti, a driver mismatch
        return None, f"cupti-python could not be loaded ({type(exc).__name__}: {exc}); pip install 'gpuwatch[probe]'"
    try:
        from importlib.metadata import version
        ver = version("cupti-python")
    except Exception:  # noqa: BLE001 - a source checkout without metadata
        ver = "unknown"
    return cupti, ver


class CuptiSource:
    """Activity recording for one window at a time (``start``, then ``stop`` returns the records)."""

    def __init__(self, cupti: Any) -> None:
        self.cupti = cupti
        self.kinds = (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET,
                      cupti.ActivityKind.SYNCHRONIZATION, cupti.ActivityKind.RUNTIME)
        self._kernel, self._memcpy = cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY
        self._memset, self._sync = cupti.ActivityKind.MEMSET, cupti.ActivityKind.SYNCHRONIZATION
        self._runtime = cupti.ActivityKind.RUNTIME
        self._launch_cbids = {int(c) for c in cupti.runtime_api_trace_cbid
                              if any(w in c.name for w in _LAUNCH_WORDS)}
        self._other_cbids = [int(c) for c in cupti.runtime_api_trace_cbid if int(c) not in self._launch_cbids
                             and c.name not in ("INVALID", "SIZE", "FORCE_INT")]
        self._lock = threading.Lock()
        self._window: WindowAggregator | None = None
        self._enabled: list[Any] = []
        self.runtime_filtered = False
        self.lost_buffers = 0

    # ---- the window ----
    def start(self, window: WindowAggregator) -> None:
        """Register the buffer callbacks (again: another tool may have taken them since) and enable."""
        with self._lock:
            self._window = window
        self.cupti.activity_register_callbacks(self._requested, self._completed)
        for kind in self.kinds:
            self.cupti.activity_enable(kind)
            self._enabled.append(kind)
        self._filter_runtime()

    def stop(self) -> None:
        """Disable, and flush what CUPTI still holds into the window's aggregator."""
        while self._enabled:
            self.cupti.activity_disable(self._enabled.pop())
        self.cupti.activity_flush_all(1)
        with self._lock:
            self._window = None

    def dropped(self) -> int:
        """Records CUPTI dropped since the last call (buffers it could not get)."""
        try:
            return int(self.cupti.activity_get_num_dropped_records(0, 0))
        except Exception:  # noqa: BLE001 - an older binding's signature; the count is optional
            return 0

    def _filter_runtime(self) -> None:
        """Runtime API records for launch calls only (each launch one record, not every API call)."""
        enable = getattr(self.cupti, "activity_enable_runtime_api", None)
        if enable is None:
            return
        try:
            for cbid in self._other_cbids:
                enable(cbid, 0)
            for cbid in self._launch_cbids:
                enable(cbid, 1)
            self.runtime_filtered = True
        except Exception:  # noqa: BLE001 - CUPTI before 12.6 has no per-API switch: every call is recorded
            self.runtime_filtered = False

    # ---- CUPTI's callbacks (its thread) ----
    def _requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _completed(self, activities: list[Any]) -> None:
        with self._lock:
            window = self._window
        if window is None:
            self.lost_buffers += 1  # a buffer completed between windows (after stop): nothing to add it to
            return
        add = self._record
        for a in activities:
            add(window, a)

    def _record(self, window: WindowAggregator, a: Any) -> None:
        kind = a.kind
        if kind == self._kernel:
            window.kernel(a.device_id, a.name, a.start, a.end, (a.grid_x, a.grid_y, a.grid_z),
                          (a.block_x, a.block_y, a.block_z), a.registers_per_thread,
                          a.static_shared_memory + a.dynamic_shared_memory)
        elif kind == self._runtime:
            if a.cbid in self._launch_cbids:
                window.launch_record(a.start, a.end)
        elif kind == self._memcpy:
            window.memcpy(a.copy_kind, a.src_kind, a.dst_kind, a.bytes, a.start, a.end)
        elif kind == self._memset:
            window.memset_record(a.start, a.end)
        elif kind == self._sync:
            window.sync_record(a.start, a.end)


Capability = Callable[[int], "tuple[int, int] | None"]


def device_capability() -> Capability:
    """The compute capability of a CUDA device ordinal, through cuda-bindings (cupti-python's
    dependency), cached; None when it cannot be read (occupancy is then left out)."""
    cache: dict[int, tuple[int, int] | None] = {}

    def capability(device: int) -> tuple[int, int] | None:
        if device not in cache:
            cache[device] = _read_capability(device)
        return cache[device]
    return capability


def _read_capability(device: int) -> tuple[int, int] | None:
    try:
        from cuda.bindings import driver  # type: ignore[import-not-found,unused-ignore]
        driver.cuInit(0)
        attr = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        err2, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        if int(err) or int(err2):
            return None
        return int(major), int(minor)
    except Exception:  # noqa: BLE001 - no cuda-bindings, no driver: occupancy is optional
        return None
