"""REST API benchmarks (issues 6 and 11): service history, GPU series, keep-alive latency,
the service usage refresh, 50 concurrent clients.

Usage:
    python benchmarks/bench_api.py [--dsn DSN] [--runs 40] [--load-seconds 10] [--json OUT]

Without ``--dsn`` it starts a throw-away embedded PostgreSQL in a temporary directory.
It then fills the database (straight SQL, no ingest):

* the service ``bench-train`` on 512 GPUs (64 nodes x 8, 64 pods of 8 GPUs) and a
  second service ``bench-serve`` on another 512 GPUs: 24 h of the service usage tables
  (``service_pod_usage_1m``, ``service_usage_1m``, ``service_pod_usage_1h``), as the
  usage rollup writes them;
* the last 10 minutes of raw samples of all 1,024 GPUs at 1 s (614,400 rows of
  ``gpu_samples`` and as many of ``process_samples``) and 6 hours of minute counts in
  ``gpu_samples_1m`` (368,640 rows; the earlier minutes recorded as computed), for the
  usage refresh;
* one GPU with one hour of raw samples at 1 s (3,600 rows of ``gpu_samples``).

It serves the API in this process (uvicorn, as ``gpuwatch up`` does) and measures:

1. service history, 24 h at a 1-minute step, read from the usage tables: p50/p95 of
   ``--runs`` sequential requests (the first, cold, is reported apart);
2. GPU series, 1 hour of raw data at a 1 s step (4 metrics): p50/p95 likewise;
3. keep-alive latency: ``--runs`` x 5 small requests (``/api/v1/me``) one after another
   on one kept-alive connection, against the API's own socket (TCP_NODELAY) and, as the
   baseline in the same run, the socket as it was made before (``socket(AF_INET,
   SOCK_STREAM)``, proto 0, on which asyncio leaves Nagle's algorithm on);
4. the service usage refresh from raw samples: the 10 minutes computed at once, the
   steady state (one new minute of 1,024 GPUs) and a refresh with nothing new (the
   6-hour scan of minute counts), as a share of the minute between refreshes;
5. concurrency: a second process (this file with ``--load``) runs 50 concurrent
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
RAW_MINUTES = 10  # minutes of raw samples of every GPU, for the usage refresh


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def populate(dsn: str) -> dict[str, Any]:
    import asyncpg

    from collector.api import tokens
    from collector.store import Store

    store = await Store.open(dsn, now=END)
    await store.close()
    conn = await asyncpg.connect(dsn)
    t0 = time.perf_counter()
    try:
        start = END - timedelta(hours=24)
        for s, service, ns in ((0, "bench-train", "research"), (1, "bench-serve", "prod")):
            base = s * GPUS_PER_SERVICE
            pods = GPUS_PER_SERVICE // GPUS_PER_NODE
            await conn.execute(
                "INSERT INTO gpu_inventory (gpu, node, model, pci_bus_id, first_seen, last_seen) "
                "SELECT format('GPU-bench-%s', g), format('node-%s', g / $3), 'NVIDIA H200',"
                " format('00000000:%s:00.0', to_hex(24 + g % $3)), $1, $2 "
                "FROM generate_series($4::int, $4::int + $5::int - 1) g ON CONFLICT DO NOTHING",
                start, END, GPUS_PER_NODE, base, GPUS_PER_SERVICE)
            # what the usage rollup writes: per pod and minute, 8 GPUs held the whole minute
            await conn.execute(
                "INSERT INTO service_pod_usage_1m (bucket, namespace, service, pod, gpu_seconds, running_seconds,"
                " sm_active_weighted, sm_active_weight, tensor_active_weighted, tensor_active_weight,"
                " memory_mib_seconds, energy_j, gpu_minutes, memory_mib) "
                "SELECT $1::timestamptz + m * interval '1 minute', $2, $3, format('%s-%s', $3::text, p), 480, 60,"
                " 480 * (0.5 + 0.4 * sin(p + m)), 480, 480 * (0.3 + 0.2 * cos(p + m)), 480, 480 * 58000.0,"
                " 480 * (400 + 200 * sin(m / 60.0)), 8, 8 * 58000.0 "
                "FROM generate_series(0, $4::int - 1) p, generate_series(0, 1439) m", start, ns, service, pods)
        await conn.execute(
            "INSERT INTO service_usage_1m (bucket, namespace, service, gpu_seconds, running_seconds,"
            " sm_active_weighted, sm_active_weight, tensor_active_weighted, tensor_active_weight,"
            " memory_mib_seconds, energy_j, gpu_minutes, memory_mib) "
            "SELECT bucket, namespace, service, sum(gpu_seconds), max(running_seconds), sum(sm_active_weighted),"
            " sum(sm_active_weight), sum(tensor_active_weighted), sum(tensor_active_weight),"
            " sum(memory_mib_seconds), sum(energy_j), sum(gpu_minutes), sum(memory_mib)"
            " FROM service_pod_usage_1m GROUP BY 1, 2, 3")
        await conn.execute(
            "INSERT INTO service_pod_usage_1h (bucket, namespace, service, pod, gpu_seconds, running_seconds,"
            " sm_active_weighted, sm_active_weight, tensor_active_weighted, tensor_active_weight,"
            " memory_mib_seconds, energy_j, gpu_minutes, memory_mib) "
            "SELECT date_trunc('hour', bucket), namespace, service, pod, sum(gpu_seconds), sum(running_seconds),"
            " sum(sm_active_weighted), sum(sm_active_weight), sum(tensor_active_weighted),"
            " sum(tensor_active_weight), sum(memory_mib_seconds), sum(energy_j), sum(gpu_minutes), sum(memory_mib)"
            " FROM service_pod_usage_1m GROUP BY 1, 2, 3, 4")
        # raw samples of the last RAW_MINUTES for the usage refresh: every GPU at 1 s, one process each
        raw_from = END - timedelta(minutes=RAW_MINUTES)
        await conn.execute(
            "INSERT INTO gpu_samples (ts, gpu, node, dcgm_fi_prof_sm_active, dcgm_fi_prof_pipe_tensor_active,"
            " dcgm_fi_dev_power_usage, dcgm_fi_dev_fb_used) "
            "SELECT $1::timestamptz + i * interval '1 second', format('GPU-bench-%s', g), format('node-%s', g / 8),"
            " 0.5 + 0.4 * sin(g + i), 0.3, 400 + 200 * sin(i / 60.0), 58000 "
            "FROM generate_series(0, $2::int - 1) g, generate_series(0, $3::int - 1) i",
            raw_from, 2 * GPUS_PER_SERVICE, RAW_MINUTES * 60)
        await conn.execute(
            "INSERT INTO process_samples (ts, gpu, pid, namespace, pod, container, service, used_memory_mib) "
            "SELECT ts, gpu, 1000, CASE WHEN n < $1 THEN 'research' ELSE 'prod' END,"
            " format('%s-%s', CASE WHEN n < $1 THEN 'bench-train' ELSE 'bench-serve' END, (n % $1) / 8), 'main',"
            " CASE WHEN n < $1 THEN 'bench-train' ELSE 'bench-serve' END, 58000 "
            "FROM (SELECT ts, gpu, substr(gpu, 11)::int AS n FROM gpu_samples WHERE ts >= $2) s",
            GPUS_PER_SERVICE, raw_from)
        await conn.execute(
            "INSERT INTO gpu_samples_1m (bucket, gpu, node, samples) "
            "SELECT date_trunc('minute', ts), gpu, max(node), count(*) FROM gpu_samples WHERE ts >= $1 GROUP BY 1, 2",
            raw_from)
        # the hours before: minute counts, already computed by earlier refreshes (what the 6-hour scan reads)
        await conn.execute(
            "INSERT INTO gpu_samples_1m (bucket, gpu, node, samples) "
            "SELECT $1::timestamptz + m * interval '1 minute', format('GPU-bench-%s', g), format('node-%s', g / 8), 60 "
            "FROM generate_series(0, $2::int - 1) g, generate_series(0, $3::int - 1) m",
            END - timedelta(hours=6), 2 * GPUS_PER_SERVICE, 6 * 60 - RAW_MINUTES)
        await conn.execute(
            "INSERT INTO service_usage_minutes (bucket, gpu_samples) "
            "SELECT bucket, sum(samples) FROM gpu_samples_1m WHERE bucket < $1 GROUP BY 1", raw_from)
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
        await conn.execute("ANALYZE")
        rows = {t: await conn.fetchval(f"SELECT count(*) FROM {t}")  # t: constants of this script
                for t in ("service_pod_usage_1m", "service_usage_1m", "service_pod_usage_1h", "gpu_samples",
                          "process_samples", "gpu_samples_1m")}
        token, _ = await tokens.create(conn, "viewer", None, "bench")
    finally:
        await conn.close()
    return {"token": token, "rows": rows, "populate_s": time.perf_counter() - t0}


async def usage_refresh(dsn: str) -> dict[str, Any]:
    """The usage rollup over the raw samples: all 10 minutes, then one new minute, then nothing new."""
    import asyncpg

    from collector.store import usage

    conn = await asyncpg.connect(dsn)
    try:
        raw_from = END - timedelta(minutes=RAW_MINUTES)
        last = END - timedelta(minutes=1)
        # the last minute's count is held back, as if its samples had not been rolled up yet
        held = await conn.fetch("DELETE FROM gpu_samples_1m WHERE bucket >= $1 RETURNING *", last)
        t0 = time.perf_counter()
        rebuilt = await usage.rebuild(conn, raw_from, last)
        rebuild_s = time.perf_counter() - t0
        await conn.copy_records_to_table("gpu_samples_1m", records=[tuple(r.values()) for r in held],
                                         columns=list(held[0].keys()))
        t0 = time.perf_counter()
        one = await usage.refresh(conn, END)
        one_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        none = await usage.refresh(conn, END)
        none_s = time.perf_counter() - t0
    finally:
        await conn.close()
    minutes = RAW_MINUTES - 1
    return {"gpus": 2 * GPUS_PER_SERVICE, "samples_per_gpu_minute": 60,
            "rebuild_minutes": minutes, "rebuild_rows": rebuilt, "rebuild_s": round(rebuild_s, 2),
            "rebuild_s_per_minute": round(rebuild_s / minutes, 3),
            "new_minute_rows": one, "new_minute_s": round(one_s, 3),
            "new_minute_share_of_60s": round(one_s / 60, 4),
            "nothing_new_rows": none, "nothing_new_s": round(none_s, 3)}


async def keepalive(pool: Any, token: str, runs: int) -> dict[str, Any]:
    """Small requests on one kept-alive connection: the API's socket against the old one."""
    import socket

    import uvicorn

    from collector.api import create_app
    from collector.api.server import ApiServer
    from collector.api.settings import ApiSettings

    settings = ApiSettings.model_validate({"port": 0})
    out: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    server = ApiServer(pool, settings)
    await server.start()
    try:
        out["nodelay"] = await loop.run_in_executor(None, sequential, server.url, "/api/v1/me", token, runs)
    finally:
        await server.stop()
    # the baseline: the listening socket as ApiServer made it before (proto 0: asyncio keeps Nagle on)
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    plain.bind(("127.0.0.1", 0))
    base = uvicorn.Server(uvicorn.Config(create_app(pool, settings), log_level="warning", access_log=False,
                                         lifespan="off"))
    task = asyncio.create_task(base.serve(sockets=[plain]))
    while not base.started:
        await asyncio.sleep(0.01)
    try:
        url = f"http://127.0.0.1:{plain.getsockname()[1]}"
        out["baseline_nagle"] = await loop.run_in_executor(None, sequential, url, "/api/v1/me", token, runs)
    finally:
        base.should_exit = True
        await task
        plain.close()
    out["p50_ratio_baseline_over_nodelay"] = round(out["baseline_nagle"]["p50_ms"] / out["nodelay"]["p50_ms"], 1)
    return out


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
    points = len(body.get("steps", body.get("times", [])))  # every step, nulls included
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
    refresh = await usage_refresh(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=8)
    server = ApiServer(pool, ApiSettings.model_validate({"port": 0, "max_points": 20_000}))
    await server.start()
    try:
        loop = asyncio.get_running_loop()
        token = filled["token"]
        history = await loop.run_in_executor(None, sequential, server.url, HISTORY, token, args.runs)
        series = await loop.run_in_executor(None, sequential, server.url, SERIES, token, args.runs)
        load = {}
        if args.load_seconds > 0:
            for name, path in (("series_1h_raw", SERIES), ("history_24h_1m", HISTORY)):
                load[name] = await loop.run_in_executor(None, load_process, server.url, path, token, 50,
                                                        args.load_seconds)
    finally:
        await server.stop()
    try:
        alive = await keepalive(pool, filled["token"], args.runs * 5)
    finally:
        await pool.close()
    return {"rows": filled["rows"], "populate_s": round(filled["populate_s"], 1), "usage_refresh": refresh,
            "service_history_24h_1m": history, "gpu_series_1h_1s": series, "keepalive_small_requests": alive,
            "concurrency_50": load}


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
