"""The generated fleet's records as its agents would send them: one :class:`Framer` per node, two
records a frame (1 Hz with the 1-s maximum delay), in time order. Shared by the replica tests and
benchmarks/bench_loop_block.py, which must frame the same fleet the same way."""

from __future__ import annotations

from agent.framing import Framer
from telemetry.records import EventRecord
from telemetry.wire import Message
from tests.support.incidents.generate import Fleet


def fleet_messages(nodes: int, hours: float, seed: int) -> tuple[list[Message], int]:
    """The fleet's messages and how many GPU records they hold."""
    out: list[Message] = []
    framers: dict[str, Framer] = {}
    records = 0
    for item in Fleet(nodes=nodes, hours=hours, seed=seed).records():
        framer = framers.get(item.node)
        if framer is None:
            framer = framers[item.node] = Framer(out.append, node=item.node, instance=f"{item.node}-0001",
                                                 window=2, keyframe_every=60)
        if isinstance(item, EventRecord):
            framer.add_event(item)
        else:
            framer.add(item)
            records += 1
    for framer in framers.values():
        framer.flush()
    return out, records
