"""The driver seam: the agent reaches the GPU only through :class:`~agent.driver.base.Driver`.

Two implementations: :mod:`agent.driver.nvml` (real NVML through pynvml) and
:mod:`agent.driver.simulated` (a simulated fleet with NVML's semantics). Both raise
pynvml's own exception classes, so the samplers handle one set of errors.
"""

from agent.driver.base import Driver, GpmSample, Handle, ProcessInfo, ProcessUtil, XidEvent

__all__ = ["Driver", "GpmSample", "Handle", "ProcessInfo", "ProcessUtil", "XidEvent"]
