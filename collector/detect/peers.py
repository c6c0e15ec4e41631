"""Groups of GPUs that are compared with one another (a pod's GPUs, a service's replicas).

Why bounded: each record of a GPU asks for its peers, and a list of every member costs as many
steps as the group has members. A pod has a few GPUs, but a service may have hundreds or
thousands of replicas, and then every sample would pay for all of them (a fleet of N
replicas pays N^2 a second). The detectors ask questions a sample answers as well as the
whole group (has half of them fallen, what is their median, did one of them move at that
moment), so a group larger than ``MAX_PEERS`` gives each member a fixed sample: its own
node's members first (node-local routing and a pod's GPUs share a node), then others spread
evenly over the group in GPU-id order, so every replica running the engine picks the same
sample for the same GPU. A sample is rebuilt only when the group's membership changes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from collector.detect.state import GpuState

MAX_PEERS = 32  # a group up to this size is compared whole, as it always was


class Groups:
    """Members by group key, and each member's sample of its peers in a large group."""

    def __init__(self) -> None:
        self.members: dict[str, dict[str, GpuState]] = {}
        self._version: dict[str, int] = {}
        self._samples: dict[tuple[str, str], tuple[int, tuple[GpuState, ...]]] = {}

    def add(self, key: str, st: GpuState) -> None:
        self.members.setdefault(key, {})[st.gpu] = st
        self._version[key] = self._version.get(key, 0) + 1

    def remove(self, key: str, gpu: str) -> None:
        members = self.members.get(key)
        if members is None or members.pop(gpu, None) is None:
            return
        self._samples.pop((key, gpu), None)
        if members:
            self._version[key] = self._version.get(key, 0) + 1
        else:
            del self.members[key]
            self._version.pop(key, None)

    def get(self, key: str) -> dict[str, GpuState]:
        return self.members.get(key, {})

    def candidates(self, key: str, st: GpuState) -> Iterable[GpuState]:
        """The members ``st`` is compared with (itself among them where the group is small):
        all of a small group's, a fixed sample of a large one's."""
        members = self.members.get(key)
        if not members or len(members) < 2:
            return ()
        if len(members) <= MAX_PEERS + 1:
            return members.values()
        version = self._version.get(key, 0)
        cached = self._samples.get((key, st.gpu))
        if cached is not None and cached[0] == version:
            return cached[1]
        chosen = _sample(st, members)
        self._samples[(key, st.gpu)] = (version, chosen)
        return chosen


def _sample(st: GpuState, members: dict[str, GpuState]) -> tuple[GpuState, ...]:
    """``MAX_PEERS`` of ``st``'s peers: its node's first, then evenly spaced over the rest in
    GPU-id order from a start that depends on ``st`` alone (CRC-32, not Python's salted hash)."""
    others = sorted((p for p in members.values() if p is not st), key=lambda p: p.gpu)
    near = [p for p in others if p.node == st.node][:MAX_PEERS]
    far = [p for p in others if p.node != st.node]
    room = MAX_PEERS - len(near)
    if room <= 0 or not far:
        return tuple(near)
    start = zlib.crc32(st.gpu.encode()) % len(far)
    step = len(far) / room
    picked = {(start + int(i * step)) % len(far) for i in range(min(room, len(far)))}
    return tuple(near) + tuple(far[i] for i in sorted(picked))
