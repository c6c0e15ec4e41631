"""Background rounds survive the database going away and stop at once."""

from __future__ import annotations

import asyncio
import time

from collector.periodic import every


def test_a_failed_round_is_retried_and_stop_ends_the_sleep() -> None:
    async def run() -> tuple[int, float]:
        calls = 0
        stop = asyncio.Event()

        async def step() -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ConnectionRefusedError("database away")  # an OSError: logged, retried
            if calls == 3:
                stop.set()

        task = asyncio.create_task(every(0.01, stop, step, "test round"))
        await asyncio.wait_for(task, 5)
        long_sleep = asyncio.Event()
        started = time.monotonic()
        async def nothing() -> None:
            return None

        sleeper = asyncio.create_task(every(3600, long_sleep, nothing, "idle round"))
        await asyncio.sleep(0.05)
        long_sleep.set()
        await asyncio.wait_for(sleeper, 5)
        return calls, time.monotonic() - started

    calls, waited = asyncio.run(run())
    assert calls == 3
    assert waited < 5
