"""Service history refreshes with the API off: the collector's background loop runs the rollup.

The service usage tables were filled by a task the API server owned, so ``--api-port -1``
(or a collector without its API) left service history as it was when the API last ran.
Here samples of a service are stored first, then ``gpuwatch up --api-port -1`` runs on that
database for a moment: its first background round must compute the service's minutes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from collector.store import Store
from telemetry.keys import POWER_USAGE, SM_ACTIVE
from telemetry.records import GpuRecord, ProcessRecord

ROOT = Path(__file__).resolve().parents[1]
GPU = "GPU-noapi-0000-4000-8000-000000000001"


def _samples(start: datetime) -> list[GpuRecord]:
    proc = ProcessRecord(pid=7, namespace="lab", pod="train-0", container="main", service="train",
                         used_memory_mib=1024.0)
    return [GpuRecord(ts=(start + timedelta(seconds=10 * i)).timestamp(), node="node-n", gpu=GPU,
                      model="NVIDIA H200", metrics={SM_ACTIVE: 0.5, POWER_USAGE: 300.0}, processes=[proc])
            for i in range(30)]


async def _store_samples(dsn: str, start: datetime) -> None:
    store = await Store.open(dsn, now=start)
    try:
        await store.write(_samples(start))
        await store.maintain(datetime.now(UTC))
    finally:
        await store.close()


async def _service_seconds(dsn: str) -> float:
    store = await Store.open(dsn)
    try:
        async with store.pool.acquire() as conn:
            return float(await conn.fetchval(
                "SELECT COALESCE(sum(gpu_seconds), 0) FROM service_usage_1m WHERE service = 'train'"))
    finally:
        await store.close()


def test_up_without_the_api_still_refreshes_service_history(pg_db: str) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=20)
    asyncio.run(_store_samples(pg_db, start))
    assert asyncio.run(_service_seconds(pg_db)) == 0  # nothing has computed it yet
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "gpuwatch", "up", "--simulate", "1", "--db", pg_db,
                           "--api-port", "-1", "--metrics-port", "0", "--duration", "2", "--log-level", "WARNING"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert abs(asyncio.run(_service_seconds(pg_db)) - 300.0) < 1e-6  # 30 samples x 10 s
