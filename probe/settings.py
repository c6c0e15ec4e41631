"""The probe's settings, from the environment of the workload process.

Why not pydantic-settings: the probe runs inside someone else's program and must import
nothing it does not need; a bad value is logged in one line naming the variable and the
default is used, because a probe setting must never stop the workload.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("gpuwatch.probe")

DEFAULT_SOCKET = "/run/gpuwatch/probe.sock"


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    period_s: float = 10.0  # one window in every period
    window_s: float = 1.0  # the longest window
    # a window is cut shorter when the last one's record rate says it would hold more: on the H200 a
    # tiny-kernel loop ran 1.8% slower at 10,000 (docs/gpu-validation.md), so 5,000
    max_records: int = 5_000
    socket: str = DEFAULT_SOCKET
    buffer: int = 30  # windows kept while the agent is away

    @property
    def duty(self) -> float:
        return self.window_s / self.period_s


_LIMITS: dict[str, tuple[str, float, float]] = {
    "GPUWATCH_PROBE_PERIOD_S": ("period_s", 0.05, 86400.0),
    "GPUWATCH_PROBE_WINDOW_S": ("window_s", 0.001, 3600.0),
    "GPUWATCH_PROBE_MAX_RECORDS": ("max_records", 100, 10_000_000),
    "GPUWATCH_PROBE_BUFFER": ("buffer", 1, 10_000),
}


def from_env(env: Mapping[str, str] | None = None, **overrides: float | int | str | None) -> ProbeSettings:
    """Settings from ``env`` (default ``os.environ``), then ``overrides`` (None: not given)."""
    env = os.environ if env is None else env
    values: dict[str, float | int | str] = {}
    for var, (name, low, high) in _LIMITS.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
            if not low <= value <= high:
                raise ValueError
        except ValueError:
            log.warning("gpuwatch probe: %s=%r is not a number in [%g, %g]; using the default", var, raw, low, high)
            continue
        values[name] = int(value) if name in ("max_records", "buffer") else value
    if env.get("GPUWATCH_PROBE_SOCKET"):
        values["socket"] = env["GPUWATCH_PROBE_SOCKET"]
    values.update({k: v for k, v in overrides.items() if v is not None})
    settings = ProbeSettings(**values)  # type: ignore[arg-type]
    if settings.window_s > settings.period_s:
        log.warning("gpuwatch probe: a window of %g s is longer than its period of %g s; recording always",
                    settings.window_s, settings.period_s)
        settings = ProbeSettings(settings.period_s, settings.period_s, settings.max_records, settings.socket,
                                 settings.buffer)
    return settings
