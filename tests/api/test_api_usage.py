"""Service usage counts the seconds a GPU was held (issue 11, item 8), on a real PostgreSQL.

* a 2-second run inside an otherwise unsampled minute is billed ~2 s, not the minute;
* a pod of two processes is charged both processes' memory;
* a pod that held one GPU for 10 minutes of a day reads 1 GPU while running, and a
  window average that says so;
* late data (an agent's spool replayed after the minute was computed) is folded in by
  the next refresh, and a refresh with nothing new computes nothing.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
from fastapi.testclient import TestClient

from collector.api import create_app, tokens
from collector.api.settings import ApiSettings
from collector.store import Store, usage
from telemetry.records import GpuRecord, ProcessRecord

GPU = "GPU-usage-0000-4000-8000-000000000001"
BUSY = "GPU-usage-0000-4000-8000-000000000002"


def _sample(ts: datetime, gpu: str, processes: list[ProcessRecord]) -> GpuRecord:
    return GpuRecord(ts=ts.timestamp(), node="node-u", gpu=gpu, model="NVIDIA H200",
                     metrics={"DCGM_FI_PROF_SM_ACTIVE": 0.5, "DCGM_FI_DEV_POWER_USAGE": 360.0},
                     processes=processes)


def _proc(pid: int, pod: str, service: str, mib: float) -> ProcessRecord:
    return ProcessRecord(pid=pid, namespace="lab", pod=pod, container="main", service=service, used_memory_mib=mib)


def test_usage_bills_held_seconds_and_sums_processes(pg_db: str) -> None:
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    # `up` ran for about 2 s: three samples 1 s apart, then nothing more of that GPU
    blip = [_sample(minute + timedelta(seconds=20 + i), GPU, [_proc(1, "blip-0", "blip", 1000)]) for i in range(3)]
    # a pod of two processes (30 + 10 GiB) on a GPU sampled every 10 s for 10 minutes
    steady = [_sample(minute + timedelta(minutes=5, seconds=10 * i), BUSY,
                      [_proc(10, "duo-0", "duo", 30_720), _proc(11, "duo-0", "duo", 10_240)]) for i in range(60)]

    async def main() -> tuple[str, list[int | None]]:
        store = await Store.open(pg_db, now=minute)
        try:
            await store.write(blip + steady[:30])
            await store.maintain(minute + timedelta(hours=1))
            async with store.pool.acquire() as conn:
                # the refresh at the end of the first 20 minutes, then again with nothing new
                written = [await usage.refresh(conn, minute + timedelta(minutes=20))]
                written.append(await usage.refresh(conn, minute + timedelta(minutes=20)))
                # the last 5 minutes of the duo pod arrive late (an agent's spool), then a refresh
                await store.write(steady[30:])
                await store.maintain(minute + timedelta(hours=1))
                written.append(await usage.refresh(conn, minute + timedelta(minutes=21)))
                token, _ = await tokens.create(conn, "viewer", None)
            return token, written
        finally:
            await store.close()

    token, written = asyncio.run(main())
    assert written[0] and written[1] == 0 and written[2], written  # nothing new: nothing computed
    app = create_app(None, ApiSettings.model_validate({"token_cache_seconds": 0}))
    headers = {"Authorization": f"Bearer {token}"}
    day = {"start": (minute - timedelta(hours=22)).timestamp(), "end": (minute + timedelta(hours=2)).timestamp()}
    with TestClient(app) as client:
        pool = client.portal.call(lambda: asyncpg.create_pool(pg_db, min_size=1, max_size=2))
        app.state.ctx.pool = pool
        try:
            blip_h = client.get("/api/v1/services/blip/history", headers=headers, params={**day, "step": "5m"}).json()
            duo_h = client.get("/api/v1/services/duo/history", headers=headers, params={**day, "step": "5m"}).json()
        finally:
            client.portal.call(pool.close)
    total = blip_h["total"]
    # three samples 1 s apart: 1 s each (the last one: the time since the one before), not the whole minute
    assert abs(total["gpu_seconds"] - 3.0) < 1e-6, total
    assert abs(total["cost"] - 3.0 / 3600 * 2.5) < 1e-12
    assert abs(total["energy_kwh"] - 360 * 3.0 / 3.6e6) < 1e-12
    pod = duo_h["pods"][0]
    assert pod["pod"] == "duo-0" and abs(pod["gpu_seconds"] - 600) < 1e-6  # 60 samples x 10 s, late ones included
    assert abs(pod["memory_used_mib_while_running"] - 40_960) < 1e-6  # both processes
    assert abs(pod["gpus_while_running"] - 1.0) < 1e-9 and abs(pod["running_seconds"] - 600) < 1e-6
    assert abs(pod["gpus_window_avg"] - 600 / duo_h["range_seconds"]) < 1e-9 and pod["gpus_window_avg"] < 0.01
    filled = [s for s in duo_h["steps"] if s["gpu_seconds"] is not None]
    assert 2 <= len(filled) <= 3 and abs(sum(s["gpu_seconds"] for s in filled) - 600) < 1e-6
    assert len(duo_h["steps"]) in (24 * 12, 24 * 12 + 1)  # the rest of the day: gaps (nulls), not zeros
