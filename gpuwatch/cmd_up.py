"""``gpuwatch up``: the whole system in one process on one machine.

The node agent (real NVML when a GPU is present, otherwise a simulated fleet, and it says
so), the in-process transport in place of Kafka, and the collector writing to PostgreSQL:
an embedded PostgreSQL that ``up`` starts itself in a data directory under the user's
home, or an existing one with ``--db DSN``. ``up`` also serves the REST API and
web page (``--api-port``, default 8080) and prints where /metrics, the API and the data are.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("gpuwatch.up")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "up", help="run everything in one process (simulated GPUs where there is no NVML)")
    p.add_argument("--simulate", type=int, metavar="N", help="simulate N GPUs (default: NVML, else 8 simulated)")
    p.add_argument("--db", metavar="DSN", help="use this PostgreSQL instead of the embedded one")
    p.add_argument("--data-dir", type=Path, help="embedded PostgreSQL location (default ~/.local/share/gpuwatch)")
    p.add_argument("--db-profile", choices=["auto", "timescale", "plain"], default="auto",
                   help="storage profile (default auto: TimescaleDB when the extension can be used)")
    p.add_argument("--metrics-port", type=int, default=9400, metavar="PORT", help="port of /metrics (default 9400)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of /metrics (default 127.0.0.1)")
    p.add_argument("--api-port", type=int, metavar="PORT",
                   help="port of the REST API and web page (default 8080, or a free port if 8080 is taken; "
                        "0: any free port; -1: off)")
    p.add_argument("--api-host", default="127.0.0.1", help="address of the REST API (default 127.0.0.1)")
    p.add_argument("--node-name", help="this node's name (default: $NODE_NAME or the hostname)")
    p.add_argument("--alert-rules", metavar="FILE", help="alert rules YAML (default: detect and store anomalies, "
                   "send nothing)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGTERM)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="INFO")
    p.set_defaults(func=run)


def nvml_available() -> tuple[bool, str]:
    """Whether NVML initialises and sees a GPU here, and why not if it does not."""
    try:
        import pynvml
    except ImportError:
        return False, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return False, f"NVML is not available ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return (count > 0, "NVML sees no GPU") if count == 0 else (True, f"NVML sees {count} GPU(s)")


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuwatch"


async def _ensure_database(admin_dsn: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')  # name is a constant, not input
    finally:
        await conn.close()


async def serve(args: argparse.Namespace) -> int:
    from agent.exposition import Exposition
    from agent.framing import Framer
    from agent.server import MetricsServer
    from agent.settings import AgentSettings, SettingsError, load
    from collector.consumer import DB_UNAVAILABLE
    from collector.ingest import Inbound, Ingestor
    from collector.store import Store, validate, validate_event
    from gpuwatch.cmd_agent import build_agent
    from gpuwatch.embedded_pg import EmbeddedPgError, PgServer, cluster_dir, open_cluster
    from gpuwatch.inprocess import InProcessTransport

    if args.simulate is None:
        ok, why = nvml_available()
        if not ok:
            print(f"gpuwatch up: {why}; using 8 simulated GPUs (--simulate N to choose)", file=sys.stderr)
            args.simulate = 8
    try:
        settings = load(AgentSettings, {
            "simulate": args.simulate, "metrics_port": args.metrics_port, "metrics_host": args.metrics_host,
            "node_name": args.node_name, "log_level": args.log_level,
        })
    except SettingsError as exc:
        print(f"gpuwatch up: {exc}", file=sys.stderr)
        return 2

    pg: PgServer | None = None
    if args.db:
        dsn = args.db
        where = "the PostgreSQL given with --db"
    else:
        data_dir = (args.data_dir or default_data_dir()).expanduser()
        pg_dir = cluster_dir(data_dir / "postgres")
        if pg_dir != data_dir / "postgres":
            print(f"gpuwatch up: running as root, PostgreSQL runs as an unprivileged user that cannot reach "
                  f"{data_dir}; its data goes to {pg_dir}", file=sys.stderr)
        try:
            pg = open_cluster(pg_dir)
        except EmbeddedPgError as exc:
            print(f"gpuwatch up: the embedded PostgreSQL did not start: {exc}", file=sys.stderr)
            return 1
        await _ensure_database(pg.dsn("postgres"), "gpuwatch")
        dsn = pg.dsn("gpuwatch")
        where = f"embedded PostgreSQL in {pg.root} ({dsn})"
    from collector.store import MigrationError

    try:
        store = await Store.open(dsn, profile=args.db_profile)
    except MigrationError as exc:
        print(f"gpuwatch up: {exc}", file=sys.stderr)
        if pg is not None:
            pg.stop()
        return 2
    dead: list[tuple[Inbound, str]] = []

    async def dead_letter(msg: Inbound, reason: str) -> None:
        dead.append((msg, reason))
        log.warning("dead-lettered message %d: %s", msg.offset, reason)

    ingestor = Ingestor(store, dead_letter, validate, validate_event)
    from collector.alerting.service import from_rules_file

    detection = from_rules_file(store.pool, args.alert_rules)
    ingestor.on_committed = detection.on_committed
    api = None
    if args.api_port is None or args.api_port >= 0:
        from collector.api.context import IngestStats
        from collector.api.server import ApiServer
        from collector.api.settings import ApiSettings

        ports = [8080, 0] if args.api_port is None else [args.api_port]
        for port in ports:
            api = ApiServer(store.pool, ApiSettings.model_validate({"host": args.api_host, "port": port}),
                            IngestStats(counters=lambda: ingestor.counters))
            try:
                await api.start()
                break
            except OSError as exc:
                print(f"gpuwatch up: the API cannot listen on {args.api_host}:{port}: {exc}", file=sys.stderr)
                api = None
        if api is None:
            await store.close()
            if pg is not None:
                pg.stop()
            return 1
    loop = asyncio.get_running_loop()
    transport = InProcessTransport(loop)
    agent = build_agent(settings)
    agent.open()
    framer = Framer(transport.submit)
    agent.record_sinks.append(framer.add)
    agent.event_sinks.append(framer.add_event)
    server = MetricsServer(settings.metrics_host, settings.metrics_port, Exposition(agent))
    framer.start()
    agent.start()
    server.start()
    kind = "simulated" if settings.simulate else "NVML"
    session_token = None
    secret = ""
    if api is not None and pg is not None:
        # Our own database, on this machine: like a notebook server, this run gets an admin
        # token of its own, shown once on the console (never logged) and revoked at exit.
        from collector.api import tokens

        secret, session_token = await tokens.create(store.pool, "admin", None, name="gpuwatch up (this run)")
    lines = [f"gpuwatch up: {len(agent.targets)} {kind} GPU targets on {settings.node_name}",
             f"  metrics:  http://{settings.metrics_host}:{server.port}/metrics",
             f"  database: {where} (profile {store.profile})"]
    if api is None:
        lines.append("  API:      off")
    else:
        db_hint = "DSN" if args.db else repr(dsn)
        lines.append(f"  API:      {api.url}/api/v1 (collector metrics {api.url}/metrics; "
                     f"tokens: gpuwatch token create --db {db_hint} --role viewer)")
        lines.append(f"  web page: {api.url}/#token={secret}  (this run's admin token, revoked when it stops)"
                     if session_token is not None else f"  web page: {api.url}/")
    print("\n".join(lines), flush=True)

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.duration is not None:
        loop.call_later(args.duration, stop.set)

    async def store_batch(batch: list[Inbound]) -> None:
        delay = 0.5
        while True:
            try:
                await ingestor.handle(batch)
                return
            except DB_UNAVAILABLE as exc:
                log.warning("database unavailable (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(30.0, delay * 2)

    async def consume() -> None:
        while not stop.is_set():
            batch = await transport.batch()
            if batch:
                await store_batch(batch)

    from collector.periodic import every

    tasks = [asyncio.create_task(consume()), asyncio.create_task(every(60, stop, store.maintain, "maintenance")),
             asyncio.create_task(detection.run(stop))]
    await stop.wait()
    server.stop()
    agent.stop()
    framer.stop()
    await asyncio.sleep(0)  # let call_soon_threadsafe deliveries land in the queue
    await asyncio.gather(*tasks, return_exceptions=True)
    async for batch in transport.drain():
        await store_batch(batch)
    if api is not None:  # after the agent and the drain: stopping it first lets frames pile up meanwhile
        await api.stop()
    if session_token is not None:
        from collector.api import tokens

        await tokens.revoke(store.pool, session_token.id)
    await detection.close()
    await store.close()
    if pg is not None:
        pg.stop()
    print(f"gpuwatch up: stopped; {ingestor.counters['records']} records stored, "
          f"{ingestor.counters['dead_lettered']} dead-lettered", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(args))
