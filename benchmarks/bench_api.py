"""REST API benchmarks (issue 6): service history, GPU series, 50 concurrent clients.

Usage:
    python benchmarks/bench_api.py [--dsn DSN] [--runs 40] [--load-seconds 10] [--json OUT]

Without ``--dsn`` it starts a throw-away embedded PostgreSQL in a temporary directory.
It then fills the database (straight SQL, no ingest):

* the service ``bench-train`` on 512 GPUs (64 nodes x 8, 64 pods of 8 GPUs) and a
  second service ``bench-serve`` on another 512 GPUs, 24 h of 1-minute rollups each
  (``gpu_samples_1m`` and ``process_samples_1m``: 1.47 M rows per table);
* one GPU with one hour of raw samples at 1 s (3,600 rows of ``gpu_samples``);
* ``service_usage_1m`` rebuilt from those rollups for the 24 h (timed: what the
  collector's per-minute refresh does, 24 h at once).

It serves the API in this process (uvicorn, as ``gpuwatch up`` does) and measures:

1. service history, 24 h at a 1-minute step, read from the rollups: p50/p95 of
   ``--runs`` sequential requests (the first, cold, is reported apart);
2. GPU series, 1 hour of raw data at a 1 s step (4 metrics): p50/p95 likewise;
3. concurrency: a second process (this file with ``--load``) runs 50 concurrent
   clients on loopback for ``--load-seconds`` per endpoint and reports throughput
   and latency percentiles.

Latencies are end to end over HTTP on loopback (JSON encoding included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPUS_PER_SERVICE = 512
GPUS_PER_NODE = 8
END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)  # fixed, so runs are comparable
SERIES_GPU = "GPU-bench-series-0000"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def populate(dsn: str) -> dict[str, Any]:
    import asyncpg

    from collector.store import Store

    store = await Store.open(dsn, now=END)
    await store.close()
    conn = await asyncpg.connect(dsn)
    t0 = time.perf_counter()
    try:
        start = END - timedelta(hours=24)
        for s, service, ns in ((0, "bench-train", "research"), (1, "bench-serve", "prod")):
            base = s * GPUS_PER_SERVICE
            await conn.execute(
                "INSERT INTO gpu_inventory (gpu, node, model, first_seen, last_seen) "
                "SELECT format('GPU-bench-%s', g), format('node-%s', g / $3), 'NVIDIA H200', $1, $2 "
                "FROM generate_series($4::int, $4::int + $5::int - 1) g ON CONFLICT DO NOTHING",
                start, END, GPUS_PER_NODE, base, GPUS_PER_SERVICE)
            await conn.execute(
                "INSERT INTO gpu_samples_1m (bucket, gpu, node, samples, dcgm_fi_prof_sm_active,"
                " dcgm_fi_prof_pipe_tensor_active, dcgm_fi_dev_power_usage, dcgm_fi_dev_fb_used,"
                " dcgm_fi_dev_gpu_temp) "
                "SELECT $1::timestamptz + m * interval '1 minute', format('GPU-bench-%s', g),"
                " format('node-%s', g / $2), 60, 0.5 + 0.4 * sin(g + m), 0.3 + 0.2 * cos(g + m),"
                " 400 + 200 * sin(m / 60.0), 60000, 55 "
                "FROM generate_series($3::int, $3::int + $4::int - 1) g, generate_series(0, 1439) m",
                start, GPUS_PER_NODE, base, GPUS_PER_SERVICE)
            await conn.execute(
                "INSERT INTO process_samples_1m (bucket, gpu, namespace, pod, service, samples, sm_util, mem_util,"
                " used_memory_mib, used_memory_mib_max) "
                "SELECT $1::timestamptz + m * interval '1 minute', format('GPU-bench-%s', g), $2,"
                " format('%s-%s', $3::text, (g - $4) / 8), $3, 60, 80, 30, 58000, 59000 "
                "FROM generate_series($4::int, $4::int + $5::int - 1) g, generate_series(0, 1439) m",
                start, ns, service, base, GPUS_PER_SERVICE)
        hour = END - timedelta(hours=1)
        await conn.execute(
            "INSERT INTO gpu_inventory (gpu, node, model, first_seen, last_seen) VALUES ($1, 'node-series',"
            " 'NVIDIA H200', $2, $3)", SERIES_GPU, hour, END)
        await conn.execute(
            "INSERT INTO gpu_samples (ts, gpu, node, dcgm_fi_prof_sm_active, dcgm_fi_dev_fb_used,"
            " dcgm_fi_dev_power_usage, dcgm_fi_dev_gpu_temp) "
            "SELECT $2::timestamptz + i * interval '1 second', $1, 'node-series', 0.5 + 0.4 * sin(i / 60.0),"
            " 60000 + i, 400 + 100 * sin(i / 300.0), 60 "
            "FROM generate_series(0, 3599) i", SERIES_GPU, hour)
        from collector.api import usage

        t1 = time.perf_counter()
        await usage.rebuild(conn, END - timedelta(hours=24), END)
        rebuild_s = time.perf_counter() - t1
        await conn.execute("ANALYZE")
        rows = {t: await conn.fetchval(f"SELECT count(*) FROM {t}")  # t: constants of this script
                for t in ("gpu_samples_1m", "process_samples_1m", "gpu_samples", "service_usage_1m")}
        from collector.api import tokens

        token, _ = await tokens.create(conn, "viewer", None, "bench")
    finally:
        await conn.close()
    return {"token": token, "rows": rows, "populate_s": time.perf_counter() - t0, "usage_rebuild_s": rebuild_s}


HISTORY = f"/api/v1/services/bench-train/history?start={(END - timedelta(hours=24)).timestamp():.0f}" \
          f"&end={END.timestamp():.0f}&step=60"
SERIES = (f"/api/v1/gpus/{SERIES_GPU}/series?start={(END - timedelta(hours=1)).timestamp():.0f}"
          f"&end={END.timestamp():.0f}&step=1s"
          "&metrics=DCGM_FI_PROF_SM_ACTIVE,DCGM_FI_DEV_FB_USED,DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP")


def sequential(url: str, path: str, token: str, runs: int) -> dict[str, Any]:
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        size = 0
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            resp = client.get(path)
            times.append((time.perf_counter() - t0) * 1000)
            resp.raise_for_status()
            size = len(resp.content)
            body = resp.json()
    cold, warm = times[0], times[1:]
    points = len(body.get("steps", body.get("times", [])))
    return {"runs": runs, "cold_ms": round(cold, 1), "p50_ms": round(pct(warm, 50), 1),
            "p95_ms": round(pct(warm, 95), 1), "max_ms": round(max(warm), 1), "bytes": size, "points": points}


async def _load(url: str, path: str, token: str, clients: int, seconds: float) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                                 limits=limits) as client:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    resp = await client.get(path)
                    ok = resp.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    latencies.append((time.perf_counter() - t0) * 1000)
                else:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {"clients": clients, "seconds": round(wall, 1), "requests": len(latencies), "errors": errors,
            "rps": round(len(latencies) / wall, 1), "p50_ms": round(pct(latencies, 50), 1),
            "p95_ms": round(pct(latencies, 95), 1), "p99_ms": round(pct(latencies, 99), 1)}


def load_process(url: str, path: str, token: str, clients: int, seconds: float) -> dict[str, Any]:
    """Run the load generator in a second process (so it does not share the server's CPU time slice)."""
    out = subprocess.run(
        [sys.executable, __file__, "--load", url, path, "--clients", str(clients), "--load-seconds", str(seconds)],
        capture_output=True, text=True, timeout=seconds + 120, check=True, input=token,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


async def serve_and_measure(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    from collector.api.server import ApiServer
    from collector.api.settings import ApiSettings

    filled = await populate(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=8)
    server = ApiServer(pool, ApiSettings.model_validate({"port": 0, "max_points": 20_000}), refresh_usage=False)
    await server.start()
    try:
        loop = asyncio.get_running_loop()
        token = filled["token"]
        history = await loop.run_in_executor(None, sequential, server.url, HISTORY, token, args.runs)
        series = await loop.run_in_executor(None, sequential, server.url, SERIES, token, args.runs)
        load = {}
        for name, path in (("series_1h_raw", SERIES), ("history_24h_1m", HISTORY)):
            load[name] = await loop.run_in_executor(None, load_process, server.url, path, token, 50,
                                                    args.load_seconds)
    finally:
        await server.stop()
        await pool.close()
    return {"rows": filled["rows"], "populate_s": round(filled["populate_s"], 1),
            "usage_rebuild_24h_s": round(filled["usage_rebuild_s"], 1),
            "service_history_24h_1m": history, "gpu_series_1h_1s": series, "concurrency_50": load}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="PostgreSQL DSN (an empty database); default: a temporary embedded one")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--load", nargs=2, metavar=("URL", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=50, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        token = sys.stdin.read().strip()
        print(json.dumps(asyncio.run(_load(args.load[0], args.load[1], token, args.clients, args.load_seconds))))
        return 0
    pg = None
    root = None
    dsn = args.dsn
    if dsn is None:
        from gpuwatch.embedded_pg import open_cluster

        root = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-api-"))
        root.chmod(0o755)
        pg = open_cluster(root, {"fsync": "off", "synchronous_commit": "off", "shared_buffers": "512MB",
                                 "timezone": "UTC", "max_wal_size": "4GB"})
        dsn = pg.dsn("postgres")
    try:
        result = asyncio.run(serve_and_measure(dsn, args))
    finally:
        if pg is not None:
            pg.stop()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    result["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                         "platform": platform.platform(), "date": datetime.now(UTC).strftime("%Y-%m-%d")}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
