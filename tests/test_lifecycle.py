"""gpuwatch.lifecycle: parts stop last-started first, under one deadline, and a failing stop stops nothing else."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuwatch.lifecycle import Parts, Stop


def test_parts_stop_in_reverse_under_one_deadline(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    calls: list[tuple[str, float]] = []
    parts = Parts(clock=lambda: now[0])

    def slow(name: str, seconds: float) -> Stop:
        def stop(timeout: float) -> None:
            calls.append((name, timeout))
            now[0] += seconds
        return stop

    async def failing(timeout: float) -> None:
        calls.append(("broken", timeout))
        raise RuntimeError("the loop is closed")

    parts.add("the store", slow("store", 0.0))
    parts.add("the broken one", failing)
    parts.add("the consumer", slow("consumer", 12.0), most=10.0)
    parts.add("the API", slow("api", 3.0))
    with caplog.at_level(logging.WARNING, logger="gpuwatch.shutdown"):
        asyncio.run(parts.shutdown(20.0))
    assert calls == [("api", 20.0), ("consumer", 10.0), ("broken", 5.0), ("store", 5.0)]
    assert "stopping the broken one failed (shutdown goes on): RuntimeError: the loop is closed" in caplog.text
    asyncio.run(parts.shutdown(20.0))  # a second shutdown stops nothing twice
    assert len(calls) == 4
