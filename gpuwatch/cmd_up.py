"""``gpuwatch up``: the whole system in one process on one machine.

Today that is the node agent: real NVML when a GPU is present, otherwise a simulated
fleet (and it says so), serving dcgm-exporter-compatible /metrics. The collector, its
embedded PostgreSQL and the REST API join this process as they land (issue 4: the
pipeline; issue 6: the API); ``up`` stays the README's main command throughout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "up", help="run everything in one process (simulated GPUs where there is no NVML)")
    p.add_argument("--simulate", type=int, metavar="N", help="simulate N GPUs (default: NVML, else 8 simulated)")
    p.add_argument("--metrics-port", type=int, default=9400, metavar="PORT", help="port of /metrics (default 9400)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of /metrics (default 127.0.0.1)")
    p.add_argument("--node-name", help="this node's name (default: $NODE_NAME or the hostname)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def nvml_available() -> tuple[bool, str]:
    """Whether NVML initialises and sees a GPU here, and why not if it does not."""
    try:
        import pynvml
    except ImportError:
        return False, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return False, f"NVML is not available ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return (count > 0, "NVML sees no GPU") if count == 0 else (True, f"NVML sees {count} GPU(s)")


def run(args: argparse.Namespace) -> int:
    from gpuwatch import cmd_agent

    if args.simulate is None:
        ok, why = nvml_available()
        if not ok:
            print(f"gpuwatch up: {why}; using 8 simulated GPUs (--simulate N to choose)", file=sys.stderr)
            args.simulate = 8
    for name in ("interval_floor", "interval_ceiling", "busy_interval", "cpu_budget", "kubeconfig"):
        setattr(args, name, None)
    return cmd_agent.run(args)
