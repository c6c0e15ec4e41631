"""Loopback ports for the services the tests start.

Why not ``bind(0)``: the kernel hands out those ports from the ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), the same range every outgoing
connection's local port comes from. A broker stopped for 30 s and restarted on "its" port
then finds it taken by some client's connection (or by another xdist worker's service) and
exits, and the test waits on a broker that is not there. These ports come from below that
range, from a slice of their own per xdist worker, and are checked free when handed out.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32000  # below the default ephemeral range
_SLICES = 16


def _slice() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = (_HIGH - _LOW) // _SLICES
    low = _LOW + (index % _SLICES) * width
    return low, low + width


_handed: set[int] = set()  # never the same port twice in one process: two asked for before either binds


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range, and not
    handed out before in this process (the live deploy stack asked for the agent's and the
    collector's ports before starting either; when both drew the same one, the collector found
    it taken)."""
    low, high = _slice()
    for _ in range(200):
        port = random.randrange(low, high)
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the slice is full: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
