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
        # a large group's members in GPU-id order and by node, built once per membership version and
        # shared by its members' samples (each member's own sort would cost N log N a member, N^2 log N
        # a change, in a service of thousands of replicas that restarts a pod every few seconds)
        self._ordered: dict[str, tuple[int, list[GpuState], dict[str, list[GpuState]]]] = {}

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
            self._ordered.pop(key, None)

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
        shared = self._ordered.get(key)
        if shared is None or shared[0] != version:
            ordered = sorted(members.values(), key=lambda p: p.gpu)
            by_node: dict[str, list[GpuState]] = {}
            for p in ordered:
                by_node.setdefault(p.node, []).append(p)
            shared = self._ordered[key] = (version, ordered, by_node)
        chosen = _sample(st, shared[1], shared[2])
        self._samples[(key, st.gpu)] = (version, chosen)
        return chosen


def _sample(st: GpuState, ordered: list[GpuState], by_node: dict[str, list[GpuState]]) -> tuple[GpuState, ...]:
    """``MAX_PEERS`` of ``st``'s peers: its node's first, then evenly spaced over the others in
    GPU-id order (``ordered``: the whole group) from a start that depends on ``st`` alone (CRC-32,
    not Python's salted hash); a pick on its own node moves on to the next member. Costs about
    ``MAX_PEERS`` steps, not the group's size."""
    near = [p for p in by_node.get(st.node, ()) if p is not st][:MAX_PEERS]
    far = len(ordered) - len(by_node.get(st.node, ()))
    room = min(MAX_PEERS - len(near), far)
    if room <= 0:
        return tuple(near)
    n = len(ordered)
    start = zlib.crc32(st.gpu.encode()) % n
    step = n / room
    picked: list[int] = []
    taken: set[int] = set()
    for i in range(room):
        at = (start + int(i * step)) % n
        while at in taken or ordered[at].node == st.node:
            at = (at + 1) % n
        taken.add(at)
        picked.append(at)
    return tuple(near) + tuple(ordered[i] for i in sorted(picked))
