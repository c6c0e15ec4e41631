"""Starting a Kafka client that may come up after the collector: retried, logged once, then counted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError

from telemetry.ratelimit import RateLimitedLog

MAX_BACKOFF_S = 30.0


async def retry_start(start: Callable[[], Awaitable[None]], what: str, bootstrap: str, stopping: asyncio.Event,
                      limited: RateLimitedLog) -> None:
    """Run ``start`` until it connects; raises its error once ``stopping`` is set."""
    delay = 0.5
    while True:
        try:
            await start()
            limited.resolved(f"start:{what}", "%s connected to %s", what, bootstrap)
            return
        except KafkaError as exc:
            if stopping.is_set():
                raise
            limited.warning(f"start:{what}", "%s cannot reach Kafka at %s (%s); retrying", what, bootstrap, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
            delay = min(MAX_BACKOFF_S, delay * 2)
