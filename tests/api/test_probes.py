"""``/healthz`` and ``/readyz`` of the collector's API: no token, no database round trip.

``/healthz`` answers while the process serves; ``/readyz`` only while the store's pool is
open and ingest says it can take data (the consumer joined its group). The chart's probes
and the image's HEALTHCHECK use them; ``tests/deploy/test_live_deploy.py`` runs the
rendered probes against a real collector.
"""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from collector.api.context import IngestStats
from collector.api.server import ApiServer
from collector.api.settings import ApiSettings


def test_healthz_always_and_readyz_once_ingest_joined_and_while_the_store_is_open(pg_dsn: str) -> None:
    async def main() -> list[tuple[str, int, dict[str, str]]]:
        pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
        why: list[str | None] = ["the consumer has not joined group gpuwatch-collector yet"]
        server = ApiServer(pool, ApiSettings.model_validate({"port": 0, "metrics_auth": True}),
                           IngestStats(not_ready=lambda: why[0]))
        await server.start()
        seen: list[tuple[str, int, dict[str, str]]] = []
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                async def probe(path: str) -> None:
                    resp = await client.get(server.url + path)
                    seen.append((path, resp.status_code, resp.json()))

                await probe("/healthz")
                await probe("/readyz")
                why[0] = None  # the consumer got its assignment
                await probe("/readyz")
                await pool.close()  # the store is closing (shutdown): not ready, still alive
                await probe("/readyz")
                await probe("/healthz")
        finally:
            await server.stop()
            await pool.close()
        return seen

    assert asyncio.run(main()) == [
        ("/healthz", 200, {"status": "ok"}),
        ("/readyz", 503, {"status": "not ready", "reason": "the consumer has not joined group gpuwatch-collector yet"}),
        ("/readyz", 200, {"status": "ready"}),
        ("/readyz", 503, {"status": "not ready", "reason": "the store is closed"}),
        ("/healthz", 200, {"status": "ok"}),
    ]


def test_in_process_ingest_is_ready_without_a_consumer() -> None:
    async def main() -> int:
        server = ApiServer(None, ApiSettings.model_validate({"port": 0}))
        await server.start()
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                return (await client.get(server.url + "/readyz")).status_code
        finally:
            await server.stop()

    assert asyncio.run(main()) == 200
