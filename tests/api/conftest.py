"""Fixtures of the API tests: one migrated database per module with a known fleet, tokens
of every role and scope, and a client over the app on the session's real PostgreSQL.

The fleet (timestamps end a few seconds before the wall clock, so "now" views see it):

* node-a: GPU A1 held by research/trainer-0 (service llm) for the first 15 minutes, then
  by prod/batch-0 (service etl); GPU A3 held by research/trainer-1 (llm) throughout;
* node-b: GPU B1 held by prod/serve-1 (service chat, two processes: 20,000 + 5,000 MiB), whose
  inference server the agent scrapes (42.5 requests/s, 3 pending, 25 ms queued, from the second
  sample on); GPU B2 idle.

Each node's first GPU (A1, B1) has the lower PCI bus id, so its index is 0.

Samples every 10 s for 30 minutes; rollups filled by ``Store.maintain``. CUPTI kernel windows
(:func:`kernel_windows`): research/llm's trainer-0 and trainer-1, prod/chat's serve-1, and a prod pod
batch-0 running a service also named llm (so scopes must split one service name). Events,
anomalies, alerts and silences exist for both namespaces. If the anomaly migration
(common/0020, another issue's) is not there yet, its tables are created here from the
agreed schema.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from fastapi.testclient import TestClient

from collector.api import create_app, tokens
from collector.api.settings import ApiSettings
from collector.store import Store, usage
from collector.store import kernels as kernel_store
from telemetry.kernels import KernelWindow
from telemetry.records import EventRecord, GpuRecord, ProcessRecord
from tests.fixtures_pg import PgServer
from tests.support.kernel_windows import training

A1 = "GPU-a1a1a1a1-0000-4000-8000-0000000000a1"
A3 = "GPU-a3a3a3a3-0000-4000-8000-0000000000a3"
B1 = "GPU-b1b1b1b1-0000-4000-8000-0000000000b1"
B2 = "GPU-b2b2b2b2-0000-4000-8000-0000000000b2"
GPUS = {A1: "node-a", A3: "node-a", B1: "node-b", B2: "node-b"}
#: Strings that must never reach a research-scoped token.
PROD_MARKERS = ("prod", "batch-0", "serve-1", "etl", "chat", B1, B2, "node-b")
SPAN = timedelta(minutes=30)
STEP_S = 10

ANOMALY_DDL = """
CREATE TABLE IF NOT EXISTS anomalies (id bigserial PRIMARY KEY, fingerprint text NOT NULL, kind text NOT NULL,
  severity text NOT NULL, gpu text, node text, namespace text, pod text, service text, metric text,
  start_ts timestamptz NOT NULL, end_ts timestamptz, summary text NOT NULL, causes jsonb NOT NULL DEFAULT '[]',
  UNIQUE (fingerprint, start_ts));
CREATE TABLE IF NOT EXISTS alerts (id bigserial PRIMARY KEY, rule text NOT NULL, fingerprint text NOT NULL,
  status text NOT NULL, severity text NOT NULL, namespace text, service text, gpu text, node text,
  summary text NOT NULL, labels jsonb NOT NULL DEFAULT '{}', starts_at timestamptz NOT NULL, ends_at timestamptz,
  anomaly_id bigint, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS silences (id bigserial PRIMARY KEY, matchers jsonb NOT NULL,
  starts_at timestamptz NOT NULL DEFAULT now(), ends_at timestamptz NOT NULL, created_by text, comment text,
  created_at timestamptz NOT NULL DEFAULT now());
"""


def _holders(gpu: str, i: int, n: int) -> list[ProcessRecord]:
    if gpu == A1:
        if i < n // 2:
            return [ProcessRecord(pid=100, namespace="research", pod="trainer-0", container="main", service="llm",
                                  used_memory_mib=40_000, sm_util=90)]
        return [ProcessRecord(pid=200, namespace="prod", pod="batch-0", container="main", service="etl",
                              used_memory_mib=10_000, sm_util=30)]
    if gpu == A3:
        return [ProcessRecord(pid=300, namespace="research", pod="trainer-1", container="main", service="llm",
                              used_memory_mib=42_000, sm_util=85)]
    if gpu == B1:
        return [ProcessRecord(pid=400, namespace="prod", pod="serve-1", container="main", service="chat",
                              used_memory_mib=20_000, sm_util=50),
                ProcessRecord(pid=401, namespace="prod", pod="serve-1", container="sidecar", service="chat",
                              used_memory_mib=5_000, sm_util=0)]
    return []


def fleet_records(end: datetime) -> list[GpuRecord]:
    n = int(SPAN.total_seconds()) // STEP_S
    start = end - SPAN
    out: list[GpuRecord] = []
    for i in range(n):
        ts = (start + timedelta(seconds=i * STEP_S)).timestamp()
        for idx, (gpu, node) in enumerate(GPUS.items()):
            holders = _holders(gpu, i, n)
            busy = (holders[0].sm_util or 0) / 100 if holders else 0.0
            out.append(GpuRecord(
                ts=ts, node=node, gpu=gpu, gpu_index=idx % 2, model="NVIDIA H200",
                pci_bus_id=f"00000000:{0x18 + 0x20 * (idx % 2):02X}:00.0",
                metrics={"DCGM_FI_PROF_SM_ACTIVE": busy, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": busy / 2,
                         "DCGM_FI_DEV_POWER_USAGE": 100 + 500 * busy, "DCGM_FI_DEV_GPU_TEMP": round(40 + 30 * busy),
                         "DCGM_FI_DEV_FB_USED": round(sum(h.used_memory_mib or 0 for h in holders)),
                         "DCGM_FI_DEV_FB_FREE": 140_000, "DCGM_FI_DEV_GPU_UTIL": round(100 * busy),
                         "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0},
                processes=holders,
            ))
            if gpu == B1 and i > 0:  # the serving pod's scraped figures (absent before its second scrape)
                out[-1].metrics.update({"gpuwatch_inference_requests_per_second": 42.5,
                                        "gpuwatch_inference_pending_requests": 3.0,
                                        "gpuwatch_inference_queue_seconds": 0.025})
    return out


def kernel_windows(end: datetime) -> list[KernelWindow]:
    """Windows a minute apart from 25 minutes before ``end``: trainer-1 six, trainer-0 two,
    prod's batch-0 (service llm too, three times the GEMM time) two, prod's serve-1 (chat) three."""
    t0 = (end - timedelta(minutes=25)).timestamp()
    out = [training(t0 + 60 * i, pid=300, gpu=A3, pod="trainer-1") for i in range(6)]
    out += [training(t0 + 60 * i + 5, pid=100, gpu=A1, pod="trainer-0") for i in range(2)]
    out += [training(t0 + 60 * i + 7, pid=200, gpu=A1, namespace="prod", pod="batch-0", scale=3) for i in range(2)]
    out += [training(t0 + 60 * i, pid=400, node="node-b", gpu=B1, namespace="prod", pod="serve-1", service="chat")
            for i in range(3)]
    return out


@dataclass
class Fleet:
    dsn: str
    end: datetime
    tokens: dict[str, str]

    @property
    def start(self) -> datetime:
        return self.end - SPAN


async def _populate(dsn: str, end: datetime) -> dict[str, str]:
    store = await Store.open(dsn, now=end)
    try:
        await store.pool.execute(ANOMALY_DDL)
        await store.write(fleet_records(end), [
            EventRecord(ts=(end - timedelta(minutes=25)).timestamp(), node="node-a", gpu=A1, kind="xid", code=13,
                        detail="research-time xid"),
            EventRecord(ts=(end - timedelta(minutes=5)).timestamp(), node="node-a", gpu=A1, kind="xid", code=31,
                        detail="prod-time xid"),
            EventRecord(ts=(end - timedelta(minutes=5)).timestamp(), node="node-b", gpu=B1, kind="xid", code=43,
                        detail="prod xid"),
        ])
        await kernel_store.save(store.pool, kernel_windows(end))
        await store.maintain(end + timedelta(minutes=2))
        async with store.pool.acquire() as conn:
            await usage.rebuild(conn, end - SPAN - timedelta(minutes=2), end + timedelta(minutes=2))
        t = end - timedelta(minutes=10)
        for ns, svc, pod, gpu, node in (("research", "llm", "trainer-1", A3, "node-a"),
                                        ("prod", "chat", "serve-1", B1, "node-b"),
                                        (None, None, None, B2, "node-b")):
            aid = await store.pool.fetchval(
                "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, namespace, pod, service, metric,"
                " start_ts, summary, causes) VALUES ($1, 'thermal_throttle', 'warning', $2, $3, $4, $5, $6,"
                " 'DCGM_FI_DEV_GPU_TEMP', $7, $8, '[\"hot\"]') RETURNING id",
                f"fp-{gpu}", gpu, node, ns, pod, svc, t, f"anomaly on {node} {ns} {svc}")
            await store.pool.execute(
                "INSERT INTO alerts (rule, fingerprint, status, severity, namespace, service, gpu, node, summary,"
                " labels, starts_at, anomaly_id) VALUES ('thermal', $1, 'firing', 'warning', $2, $3, $4, $5, $6,"
                " $7::jsonb, $8, $9)",
                f"fp-{gpu}", ns, svc, gpu, node, f"alert on {node} {ns} {svc}",
                json.dumps({"namespace": ns} if ns else {}), t, aid)
        for ns in ("research", "prod"):
            await store.pool.execute(
                "INSERT INTO silences (matchers, ends_at, created_by, comment) VALUES ($1::jsonb, $2, 'test', $3)",
                json.dumps({"namespace": ns}), end + timedelta(hours=1), f"quiet {ns}")
        made: dict[str, str] = {}
        for key, role, scope in (("admin", "admin", None), ("viewer", "viewer", None),
                                 ("operator", "operator", None), ("research", "viewer", ["research"]),
                                 ("research_op", "operator", ["research"]), ("research_admin", "admin", ["research"]),
                                 ("nobody", "viewer", ["empty-ns"])):
            made[key], _ = await tokens.create(store.pool, role, scope, name=key)
        return made
    finally:
        await store.close()


@pytest.fixture(scope="module")
def fleet_db(pg_server: PgServer) -> Iterator[Fleet]:
    """A database holding the fleet above, shared by the tests of one module (read-mostly)."""
    pg_server.start()
    name = f"api{os.getpid()}_{int(time.time() * 1000) % 10_000_000}"
    pg_server.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
    dsn = pg_server.dsn(name)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    try:
        made = asyncio.run(_populate(dsn, end))
        yield Fleet(dsn, end, made)
    finally:
        pg_server.start()
        pg_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Api:
    """A synchronous client over the app, with one method per auth flavour."""

    def __init__(self, client: TestClient, fleet: Fleet) -> None:
        self.client = client
        self.fleet = fleet

    def get(self, path: str, token: str | None = "admin", **params: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.fleet.tokens[token]}"} if token else {}
        return self.client.get(f"/api/v1{path}", params=params, headers=headers)

    def call(self, method: str, path: str, token: str = "admin", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.fleet.tokens[token]}"}
        return self.client.request(method, f"/api/v1{path}", headers=headers, **kw)


@pytest.fixture(scope="module")
def api(fleet_db: Fleet) -> Iterator[Api]:
    settings = ApiSettings.model_validate({"token_cache_seconds": 0, "max_points": 5000, "stale_after_seconds": 3600})
    app = create_app(None, settings)
    with TestClient(app) as client:
        pool = client.portal.call(lambda: asyncpg.create_pool(fleet_db.dsn, min_size=1, max_size=4))
        app.state.ctx.pool = pool
        try:
            yield Api(client, fleet_db)
        finally:
            client.portal.call(pool.close)


@dataclass
class LiveApi:
    url: str
    fleet: Fleet


@pytest.fixture(scope="module")
def live_api(fleet_db: Fleet) -> Iterator[LiveApi]:
    """The app served by uvicorn (:class:`ApiServer`) on a free loopback port, in a thread
    with its own event loop and pool; for clients that need a real HTTP server."""
    import threading

    from collector.api.server import ApiServer

    started = threading.Event()
    holder: dict[str, Any] = {}

    async def main() -> None:
        pool = await asyncpg.create_pool(fleet_db.dsn, min_size=1, max_size=4)
        server = ApiServer(pool, ApiSettings.model_validate({"port": 0, "token_cache_seconds": 0, "max_points": 5000,
                                                             "stale_after_seconds": 3600}))
        await server.start()
        stop = asyncio.Event()
        holder.update(url=server.url, stop=stop, loop=asyncio.get_running_loop())
        started.set()
        await stop.wait()
        await server.stop()
        await pool.close()

    def run() -> None:
        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=run, name="live-api", daemon=True)
    thread.start()
    assert started.wait(30) and "url" in holder, "the API server did not start"
    try:
        yield LiveApi(holder["url"], fleet_db)
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(30)
