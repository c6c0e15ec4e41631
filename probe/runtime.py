"""The probe's loop: one short recording window in every period, folded and sent, never in the way.

Why duty-cycled and capped: CUPTI's activity records cost the workload per record (in the
driver, and in Python when a buffer is read: on the H200 a loop of tiny kernels ran 30%
slower with kernels recorded all the time, docs/gpu-validation.md). So the probe records
``window_s`` in every ``period_s`` (1 s in 10 s by default), and a window is cut shorter
when the last one's record rate says it would hold more than ``max_records`` (5,000): a
launch-heavy process (150,000 kernels a second) is then recorded for a few tens of ms,
which is still thousands of kernels, and its cost stays bounded whatever it launches.

What it never does: raise into the application (every failure is logged once; three in a
row switch the probe off), record while the PyTorch profiler is recording (kineto uses the
same activity API; the window is skipped and that is logged once), or start when another
tool already holds CUPTI (a second subscriber is refused by CUPTI: logged once, off).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from probe.aggregate import WindowAggregator
from probe.cupti_source import Capability, CuptiSource, device_capability, load
from probe.demangle import demangle
from probe.settings import ProbeSettings
from probe.transport import DatagramSender
from telemetry.kernels import MAX_VALUE_BYTES, KernelWindow

log = logging.getLogger("gpuwatch.probe")

FAILURES_BEFORE_OFF = 3
SHORTEST_WINDOW_S = 0.005


def torch_profiler_active() -> bool:
    """Whether PyTorch's profiler (kineto, on the same CUPTI activity API) is recording now."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - another torch build: assume not
        return False


def command_line(pid: int | None = None) -> str:
    try:
        with open(f"/proc/{pid or 'self'}/cmdline", "rb") as f:
            return f.read(400).replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return " ".join(sys.argv)[:200]


class Probe:
    """One process's kernel statistics: ``start()`` once (idempotent), ``stop()`` at exit."""

    def __init__(self, settings: ProbeSettings, *, cupti: Any = None, sender: DatagramSender | None = None,
                 capability: Capability | None = None, conflict: Callable[[], bool] = torch_profiler_active,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._cupti = cupti
        self.sender = sender or DatagramSender(settings.socket, settings.buffer)
        self.capability = capability
        self.conflict, self.clock, self.wall = conflict, clock, wall
        self.source: CuptiSource | None = None
        self.version = ""
        self.state = "stopped"  # stopped, running, off (with self.reason)
        self.reason = ""
        self.windows = self.skipped = self.failures = 0
        self._length = min(settings.window_s, 0.1)  # the first window is short: its rate sets the next
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: set[str] = set()

    # ---- lifecycle ----
    def start(self) -> bool:
        """Load CUPTI and start the loop; False (and why, logged once) when the probe stays off."""
        if self.state == "running":
            return True
        if not self.prepare():
            return False
        self.state = "running"
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuwatch-probe", daemon=True)
        self._thread.start()
        os.register_at_fork(after_in_child=self._forked)
        log.info("gpuwatch probe: recording up to %.3g s in every %.3g s (cupti-python %s), to %s",
                 self.settings.window_s, self.settings.period_s, self.version or "?", self.settings.socket)
        return True

    def prepare(self) -> bool:
        """Load CUPTI and check nobody else holds it, without starting the loop (``window()`` then
        records one window on the caller's thread); False when the probe stays off."""
        if self.source is not None:
            return True
        try:
            if self._cupti is None:
                self._cupti, self.version = load()
                if self._cupti is None:
                    return self._off(self.version)
            if not self._no_other_subscriber():
                return self._off("another CUPTI subscriber (a profiler) holds CUPTI; the probe stays off")
            self.source = CuptiSource(self._cupti)
            if self.capability is None:
                self.capability = device_capability()
        except Exception as exc:  # noqa: BLE001 - never into the application
            return self._off(f"CUPTI could not be set up ({type(exc).__name__}: {exc})")
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self.state == "running":
            self.state = "stopped"
        self.sender.close()

    def _forked(self) -> None:
        """A forked child (a DataLoader worker) has no probe thread; it must not think it has."""
        self._thread = None
        self.state = "stopped"
        self._stop.set()

    def _off(self, reason: str) -> bool:
        self.state, self.reason = "off", reason
        self._once(reason, f"gpuwatch probe: off: {reason}")
        return False

    def _no_other_subscriber(self) -> bool:
        cupti = self._cupti
        subscribe = getattr(cupti, "subscribe", None)
        if subscribe is None:
            return True
        try:
            handle = subscribe(lambda *args: None, None)
        except Exception:  # noqa: BLE001 - CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, or any refusal
            return False
        with contextlib.suppress(Exception):  # released with the process anyway
            cupti.unsubscribe(handle)
        return True

    # ---- the loop ----
    def _run(self) -> None:
        period = self.settings.period_s
        next_at = self.clock() + min(period, 2.0)
        while not self._stop.wait(max(0.0, next_at - self.clock())):
            next_at += period
            if next_at < self.clock():  # a suspended process: no burst of catch-up windows
                next_at = self.clock() + period
            try:
                self.window()
                self.failures = 0
            except Exception as exc:  # noqa: BLE001 - never into the application
                self.failures += 1
                self._once(type(exc).__name__, f"gpuwatch probe: a window failed ({type(exc).__name__}: {exc})")
                if self.failures >= FAILURES_BEFORE_OFF:
                    self._off(f"{self.failures} windows in a row failed (last: {type(exc).__name__}: {exc})")
                    return

    def window(self) -> KernelWindow | None:
        """Record one window now, fold it and send it (None: skipped or nothing ran)."""
        source = self.source
        if source is None:
            return None
        if self.conflict():
            self.skipped += 1
            self._once("torch", "gpuwatch probe: the PyTorch profiler is recording; the probe pauses while it does")
            return None
        agg = WindowAggregator()
        ts, t0, cpu0 = self.wall(), self.clock(), time.thread_time()
        source.start(agg)
        try:
            self._stop.wait(self._length)
            duration = max(1e-6, self.clock() - t0)  # what was recorded: enable to disable, not the flush
        finally:
            source.stop()
        self._length = min(self.settings.window_s,
                           max(SHORTEST_WINDOW_S, self.settings.max_records / max(agg.records / duration, 1.0)))
        if agg.records == 0:
            return None
        window = agg.finish(ts, duration, max(self.settings.period_s, duration), os.getpid(), command_line(),
                            demangle, self.capability or (lambda _device: None),
                            probe=f"gpuwatch-probe cupti-python {self.version}".strip(),
                            dropped_records=source.dropped())
        window = replace(window, extra={"probe_cpu_s": round(time.thread_time() - cpu0, 6),
                                        "next_window_s": round(self._length, 4)})
        payload = window.encode()
        while len(payload) > MAX_VALUE_BYTES and len(window.kernels) > 10:
            window = replace(window, kernels=window.kernels[: len(window.kernels) // 2])
            payload = window.encode()
        self.sender.send(payload)
        self.windows += 1
        return window

    def _once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message)
