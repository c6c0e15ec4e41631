"""The collector's background rounds (maintenance, rollups, alert dispatch): one loop for all.

Why one: each round must survive the database going away (log it, try again next round,
never end the task silently) and must stop at once when the process stops, not at the end
of its sleep. Written once here, every background job gets both. A round that keeps
failing (alert dispatch runs every second) is logged once, then counted
(:class:`~telemetry.ratelimit.RateLimitedLog`), and its recovery is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from collector.store.errors import TRANSIENT
from telemetry.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
_limited = RateLimitedLog(log)


async def every(interval_s: float, stop: asyncio.Event, step: Callable[[], Awaitable[object]], what: str) -> None:
    """Run ``step`` now and then every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            await step()
        except TRANSIENT as exc:
            _limited.warning(what, "%s skipped, retrying every %.0f s: %s: %s", what, interval_s,
                             type(exc).__name__, exc)
        else:
            _limited.resolved(what, "%s works again", what)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
