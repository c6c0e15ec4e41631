"""Stopping long-lived parts: in reverse order of their start, under one deadline.

``gpuwatch collector`` and ``gpuwatch up`` each start a chain of parts (store, detection,
consumer, agent, ...). :class:`Parts` is told of each as it starts; :meth:`Parts.shutdown`
stops them last-started first. Each stop is given the seconds left under the deadline (at
most its own bound, ``most``); a stop that fails is logged in one line and the next ones
still run, so a dead Kafka or database never leaves the rest running.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("gpuwatch.shutdown")

# a stop is given the seconds it may take; it may be a coroutine function or a plain one
Stop = Callable[[float], Awaitable[object] | None]


@dataclass(frozen=True, slots=True)
class Part:
    name: str  # "the consumer": the subject of the log line when stopping it fails
    stop: Stop
    most: float | None = None  # this part's own bound (seconds), below what is left of the deadline


class Parts:
    """The parts in the order they started."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._parts: list[Part] = []
        self._clock = clock

    def add(self, name: str, stop: Stop, most: float | None = None) -> None:
        self._parts.append(Part(name, stop, most))

    async def shutdown(self, timeout: float) -> None:
        """Stop every part, last-started first; each is given what is left of ``timeout``."""
        from aiokafka.errors import KafkaError

        from collector.store.errors import TRANSIENT

        deadline = self._clock() + timeout
        parts, self._parts = self._parts, []
        for part in reversed(parts):
            left = max(0.0, deadline - self._clock())
            try:
                result = part.stop(left if part.most is None else min(part.most, left))
                if inspect.isawaitable(result):
                    await result
            except (RuntimeError, TimeoutError, KafkaError, *TRANSIENT) as exc:
                log.warning("stopping %s failed (shutdown goes on): %s: %s", part.name, type(exc).__name__, exc)
