"""The agent's transport seam: where its frames and events go, chosen at start.

The :class:`~agent.framing.Framer` hands each message to a :class:`Producer`: the Kafka
sender (:class:`~agent.sender.Sender`, spooling to disk while Kafka is away) in a cluster,
or the in-process queue of ``gpuwatch up`` (``gpuwatch.inprocess``). ``submit`` is called
from the agent's threads, never blocks and never raises for the transport's sake.
"""

from __future__ import annotations

from typing import Protocol

from telemetry.wire import Message


class Producer(Protocol):
    def submit(self, msg: Message) -> None:
        """Hand ``msg`` to the transport (thread-safe, never blocks)."""
