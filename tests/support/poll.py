"""The one way a test waits for something: poll a probe until it holds, fail naming what was awaited.

Why one helper: hand-rolled ``while time.monotonic() < deadline`` loops each chose their own
interval, forgot the last check, or failed with a bare ``assert``. A poll returns as soon as
the condition holds (never a fixed sleep), and the timeout only bounds how long a broken
system is waited for, so no assertion depends on timing.

A probe returns a value: anything but ``None`` or ``False`` ends the wait and is returned.
A probe that raises ends it too (a process that exited, say): the exception propagates.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A polled condition did not hold in time; the message names what was awaited."""


def _timed_out(what: str, timeout: float, details: Callable[[], object] | None) -> WaitTimeout:
    extra = f"\n{details()}" if details is not None else ""
    return WaitTimeout(f"timed out after {timeout:g} s waiting for {what}{extra}")


def _done(result: object) -> bool:
    return result is not None and result is not False


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    details: Callable[[], object] | None = None,
) -> T:
    """Call ``probe`` every ``interval`` s until it returns something other than None/False.

    Raises :class:`WaitTimeout` ("timed out after 30 s waiting for <what>", then
    ``details()``) when ``timeout`` s pass; the probe is always tried once more at the end.
    """
    deadline = time.monotonic() + timeout
    while True:
        last_chance = time.monotonic() >= deadline
        result = probe()
        if _done(result):
            return result  # type: ignore[return-value]
        if last_chance:
            raise _timed_out(what, timeout, details)
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


async def await_until(
    probe: Callable[[], T | Awaitable[T | None] | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    details: Callable[[], object] | None = None,
) -> T:
    """:func:`wait_until` on an event loop: the probe may be a coroutine function; the loop keeps running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last_chance = loop.time() >= deadline
        result = probe()
        if inspect.isawaitable(result):
            result = await result
        if _done(result):
            return result  # type: ignore[return-value]
        if last_chance:
            raise _timed_out(what, timeout, details)
        await asyncio.sleep(max(0.0, min(interval, deadline - loop.time())))
