"""The in-process transport of ``gpuwatch up``: what is queued at shutdown is still fetched, in order."""

from __future__ import annotations

import asyncio

from gpuwatch.inprocess import InProcessTransport
from telemetry.wire import Message


def test_drain_takes_everything_queued_in_order() -> None:
    async def run() -> list[bytes]:
        transport = InProcessTransport(asyncio.get_running_loop())
        for i in range(5):
            transport.submit(Message(b"gpu", f"frame-{i}".encode(), ()))
        await asyncio.sleep(0)  # the loop runs the thread-safe puts
        await transport.shutdown(1.0)
        got: list[bytes] = []
        async with asyncio.timeout(5):
            while (batch := await transport.fetch()) is not None:
                got += [m.value for m in batch]
        return got

    assert asyncio.run(run()) == [f"frame-{i}".encode() for i in range(5)]
