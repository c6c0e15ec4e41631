"""One lifecycle for every long-lived part, and stopping them in reverse order under one deadline.

Why: ``gpuwatch agent``, ``gpuwatch collector`` and ``gpuwatch up`` each start a chain of parts
(store, detection, consume loop, sampler, framer, sender, ...). Each stack
(:mod:`gpuwatch.agent_stack`, :mod:`gpuwatch.collector_stack`) has one lifecycle
(:class:`ThreadLifecycle` for the agent's threads, :class:`Lifecycle` on the event loop):
``start``, ``flush(timeout)`` (hand on what is pending, without stopping) and
``shutdown(timeout)``. Inside a stack, :class:`Parts` is told of each part as it starts;
:meth:`Parts.shutdown` stops them last-started first. Each stop is given the seconds left
under the deadline (at most its own bound, ``most``); a stop that fails is logged in one line
and the next ones still run, so a dead Kafka or database never leaves the rest running.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("gpuwatch.shutdown")

# a stop is given the seconds it may take; it may be a coroutine function or a plain one
Stop = Callable[[float], Awaitable[object] | None]


class Lifecycle(Protocol):
    """A stack of parts on the event loop (the collector's): started once, flushed any number of
    times (True: nothing was left pending), shut down once under one deadline."""

    async def start(self) -> None: ...

    async def flush(self, timeout: float) -> bool: ...

    async def shutdown(self, timeout: float) -> None: ...


class ThreadLifecycle(Protocol):
    """The same for a stack of threads (the agent's: its sampler, framer and sender run on threads
    of their own, and ``gpuwatch agent`` has no event loop)."""

    def start(self) -> None: ...

    def flush(self, timeout: float) -> bool: ...

    def shutdown(self, timeout: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Part:
    name: str  # "the consumer": the subject of the log line when stopping it fails
    stop: Stop
    most: float | None = None  # this part's own bound (seconds), below what is left of the deadline


def _failures() -> tuple[type[BaseException], ...]:
    """What a stop may fail with that must not stop the next ones (a dead broker or database). The
    agent's image has neither aiokafka's nor asyncpg's errors to catch when it has not the package."""
    found: list[type[BaseException]] = [RuntimeError, TimeoutError, OSError]
    try:
        from aiokafka.errors import KafkaError

        found.append(KafkaError)
    except ImportError:
        pass
    try:
        from collector.store.errors import TRANSIENT

        found.extend(TRANSIENT)
    except ImportError:
        pass
    return tuple(found)


class Parts:
    """The parts in the order they started."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._parts: list[Part] = []
        self._clock = clock

    def add(self, name: str, stop: Stop, most: float | None = None) -> None:
        self._parts.append(Part(name, stop, most))

    def _steps(self, timeout: float) -> Iterator[tuple[Part, float]]:
        deadline = self._clock() + timeout
        parts, self._parts = self._parts, []
        for part in reversed(parts):
            left = max(0.0, deadline - self._clock())
            yield part, left if part.most is None else min(part.most, left)

    async def shutdown(self, timeout: float) -> None:
        """Stop every part, last-started first; each is given what is left of ``timeout``."""
        failures = _failures()
        for part, budget in self._steps(timeout):
            try:
                result = part.stop(budget)
                if inspect.isawaitable(result):
                    await result
            except failures as exc:
                log.warning("stopping %s failed (shutdown goes on): %s: %s", part.name, type(exc).__name__, exc)

    def shutdown_sync(self, timeout: float) -> None:
        """The same for a stack of threads (the agent's), whose stops are plain functions."""
        failures = _failures()
        for part, budget in self._steps(timeout):
            try:
                result = part.stop(budget)
                if inspect.iscoroutine(result):
                    result.close()
                    raise RuntimeError(f"{part.name} stops asynchronously: use shutdown()")
            except failures as exc:
                log.warning("stopping %s failed (shutdown goes on): %s: %s", part.name, type(exc).__name__, exc)
