"""gpuwatch's opt-in CUPTI kernel probe: per-kernel statistics from inside a workload process.

Why inside the process: device counters (NVML, the node agent) say that a GPU is slow;
which kernels ran, how long, how often, and how long the GPU waited between them is known
only to CUPTI in the process that launches them. The probe records about 1 s in every 10 s
(:mod:`probe.runtime`) and sends each window's aggregates to the node agent over a Unix
socket (:mod:`probe.transport`); the agent adds the pod and service and forwards them.

Opt in with one line, ``import probe; probe.enable()``, or without touching the code:
``GPUWATCH_PROBE=1 python -m probe train.py`` (or put :func:`hook_dir` on ``PYTHONPATH``
with ``GPUWATCH_PROBE=1``: its ``sitecustomize`` enables the probe at start-up). It needs
``pip install 'gpuwatch[probe]'`` (cupti-python, for CUDA 13 drivers; ``cupti-python<13``
for CUDA 12). Nothing here ever raises into the application: a missing library, a version
mismatch, another profiler, or an agent that is not there is logged once, and the workload
runs on untouched.

This package imports only :mod:`telemetry` (the wire contract), never the agent or the
collector, so it can be installed alone into a workload's image.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from pathlib import Path

from probe.runtime import Probe
from probe.settings import ProbeSettings, from_env

__all__ = ["Probe", "ProbeSettings", "enable", "hook_dir"]

log = logging.getLogger("gpuwatch.probe")
_lock = threading.Lock()
_probe: Probe | None = None


def enable(*, period_s: float | None = None, window_s: float | None = None, socket: str | None = None,
           max_records: int | None = None) -> Probe | None:
    """Start the process's probe (once; later calls return the same one). None if it could not
    be set up at all; a probe that stays off says why in ``probe.reason``. Never raises."""
    global _probe
    try:
        with _lock:
            if _probe is not None and _probe.state == "running":
                return _probe
            settings = from_env(period_s=period_s, window_s=window_s, socket=socket, max_records=max_records)
            _probe = Probe(settings)
            if _probe.start():
                atexit.register(_probe.stop)
            return _probe
    except Exception as exc:  # noqa: BLE001 - never into the application
        log.warning("gpuwatch probe: not enabled (%s: %s)", type(exc).__name__, exc)
        return None


def enabled_by_env() -> bool:
    return os.environ.get("GPUWATCH_PROBE", "").strip().lower() in ("1", "true", "yes", "on")


def hook_dir() -> str:
    """The directory whose ``sitecustomize.py`` enables the probe when ``GPUWATCH_PROBE=1``."""
    return str(Path(__file__).parent / "hook")
