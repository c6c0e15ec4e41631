"""``gpuwatch up``: the whole system in one process on one machine.

The node agent (real NVML when a GPU is present, otherwise a simulated fleet, and it says
so), the in-process transport in place of Kafka, and the collector writing to PostgreSQL:
an embedded PostgreSQL that ``up`` starts itself in its data directory (reachable only
through a Unix socket there), or an existing one with ``--db DSN``. ``up`` also serves the
REST API and web page (``--api-port``, default 8080) and prints where /metrics, the API
and the data are.

Everything ``up`` starts is registered on one exit stack as it starts, so every way out
(a busy port, a dead database, a signal during start-up, an error while serving) stops
exactly what was started, in reverse order; the data directory is locked for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from gpuwatch.errors import UserError
from telemetry.kernels import UNATTRIBUTED

log = logging.getLogger("gpuwatch.up")
SESSION_TOKEN_NAME = "gpuwatch up (this run)"
SHUTDOWN_S = 20.0  # one deadline for the pipeline's stops (the agent's and the framer's 5 s each)
PROBE_SOCKET_NAME = "probe.sock"  # the kernel probe's socket in the data directory (agent/kernels.py)


def _api_port(text: str) -> int:
    port = int(text)
    if not -1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: give 1-65535, 0 (any free port) or -1 (off)")
    return port


def _price(text: str) -> float:
    price = float(text)
    if not price >= 0:
        raise argparse.ArgumentTypeError(f"a price is a number >= 0, not {text}")
    return price


def register(subparsers: Any) -> None:
    from gpuwatch.cmd_agent import add_agent_flags

    p: argparse.ArgumentParser = subparsers.add_parser(
        "up", help="run everything in one process (simulated GPUs where there is no NVML)",
        description="Run the node agent, the collector, the REST API and the web page in one process. "
                    "Without --simulate it samples the GPUs through NVML, or, where NVML sees none, simulates 8.")
    add_agent_flags(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="DSN", help="use this PostgreSQL instead of the embedded one")
    where.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="where the embedded PostgreSQL lives (default $XDG_DATA_HOME/gpuwatch or "
                            "~/.local/share/gpuwatch, also as root); one `up` at a time")
    p.add_argument("--db-profile", choices=["auto", "timescale", "plain"], default="auto",
                   help="storage profile (default auto: TimescaleDB when the extension can be used)")
    p.add_argument("--metrics-port", type=int, default=9400, metavar="PORT", help="port of /metrics (default 9400)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of /metrics (default 127.0.0.1)")
    p.add_argument("--api-port", type=_api_port, metavar="PORT",
                   help="port of the REST API and web page (default 8080, or a free port if 8080 is taken; "
                        "0: any free port; -1: off)")
    p.add_argument("--api-host", help="address of the REST API (default 127.0.0.1)")
    p.add_argument("--price-per-gpu-hour", type=_price, metavar="PRICE",
                   help="cost of a GPU-hour in service history (default 2.5)")
    p.add_argument("--alert-rules", metavar="FILE", help="alert rules YAML (default: detect and store anomalies, "
                   "send nothing)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGTERM)")
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


def _api_settings(args: argparse.Namespace) -> Any:
    """The API's settings from flags and ``GPUWATCH_API_*`` (None: ``--api-port -1``)."""
    if args.api_port is not None and args.api_port < 0:
        return None
    from agent.settings import load
    from collector.api.settings import ApiSettings
    from gpuwatch.cmd_collector import API_FLAGS

    return load(ApiSettings, {"host": args.api_host, "port": args.api_port,
                              "price_per_gpu_hour": args.price_per_gpu_hour}, env_prefix="GPUWATCH_API_",
                flags=API_FLAGS)


async def _keep_running(pg: Any, stop: asyncio.Event, every_s: float = 1.0, retry_s: float = 3.0) -> None:
    """``up`` owns its embedded PostgreSQL: when it exits under it (killed, crashed), start it
    again on the same data directory and socket. The store's pool reconnects by itself and the
    in-process queue holds the frames meanwhile, so nothing sent is lost. A start that fails
    (its backends still hold the shared memory of the one that died) is tried again."""
    from gpuwatch.embedded_pg import EmbeddedPgError

    down = False
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), retry_s if down else every_s)
        if stop.is_set():
            return
        if not down and pg.exited():
            log.warning("the embedded PostgreSQL in %s exited; starting it again", pg.root)
            down = True
        if down:
            try:
                await asyncio.to_thread(pg.start, 60.0)
            except EmbeddedPgError as exc:
                log.warning("the embedded PostgreSQL did not start again (%s); trying again in %.0f s", exc, retry_s)
                continue
            log.warning("the embedded PostgreSQL in %s runs again", pg.root)
            down = False


async def _revoke_left_over_tokens(pool: Any) -> None:
    """Revoke the session tokens of earlier runs that could not (``kill -9``): the data directory's
    lock says that no other run is using this database."""
    from collector.api import tokens

    for token in await tokens.list_tokens(pool):
        if token.name == SESSION_TOKEN_NAME and token.revoked_at is None:
            await tokens.revoke(pool, token.id)


def _probe_socket(settings: Any, data_dir: Path) -> Any:
    """The kernel probe's socket, bound: ``probe.sock`` in the data directory, owner-only, unless
    ``GPUWATCH_PROBE_SOCKET`` (empty: off) and ``GPUWATCH_PROBE_SOCKET_MODE`` say otherwise. A data
    directory too deep for a Unix socket's path turns the receiver off with a line, never ``up``."""
    from agent.kernels import socket_from_settings
    from agent.probe_socket import MAX_PATH_BYTES, ProbeSocketError

    explicit = "GPUWATCH_PROBE_SOCKET" in os.environ
    path = settings.probe_socket if explicit else str(data_dir / PROBE_SOCKET_NAME)
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        print(f"gpuwatch up: no kernel probe receiver: {path} is longer than a Unix socket path may be "
              f"({MAX_PATH_BYTES} bytes); set GPUWATCH_PROBE_SOCKET to a shorter one", file=sys.stderr)
        return None
    mode = settings.probe_socket_mode if "GPUWATCH_PROBE_SOCKET_MODE" in os.environ else 0o600
    try:
        return socket_from_settings(settings, path=path, mode=mode, holder="gpuwatch up", explicit=explicit)
    except ProbeSocketError as exc:
        raise UserError(str(exc)) from None


def _owner() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


@dataclass
class _Run:
    """What the signal handler and the start-up share: the stop event, and whether serving began."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    serving: bool = False
    signals: list[int] = field(default_factory=list)


async def serve(args: argparse.Namespace, settings: Any, api_settings: Any) -> int:
    loop = asyncio.get_running_loop()
    run = _Run()
    main = asyncio.current_task()

    def on_signal(sig: int) -> None:
        """While serving, the first signal stops gracefully (drain, then exit); any other cancels
        what is under way (start-up, or a drain that waits for a dead database)."""
        run.signals.append(sig)
        if run.serving and not run.stop.is_set():
            run.stop.set()
        elif main is not None:
            main.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        async with contextlib.AsyncExitStack() as stack:  # unwinds in reverse whatever _start started
            ingestor = await _start(args, settings, api_settings, stack, run)
            await run.stop.wait()
    except asyncio.CancelledError:
        what = "while draining to the database" if run.serving else "while starting"
        code = 128 + (run.signals[-1] if run.signals else signal.SIGINT)
        raise UserError(f"interrupted {what}; everything it had started is stopped", code=code) from None
    print(f"gpuwatch up: stopped; {ingestor.counters['records']} records stored, "
          f"{ingestor.counters['dead_lettered']} dead-lettered", flush=True)
    return 0


async def _start(args: argparse.Namespace, settings: Any, api_settings: Any, stack: contextlib.AsyncExitStack,
                 run: _Run) -> Any:
    """Start everything, each part registered on ``stack`` as soon as it runs; returns the ingestor.
    The two stacks, the agent's and the collector's, joined by the in-process transport."""
    from agent.cpuclock import ThreadCpu
    from agent.runtime import new_instance_id
    from collector.store import MigrationError, Store
    from gpuwatch.agent_stack import AgentStack, MetricsPortError
    from gpuwatch.collector_stack import CollectorOptions, CollectorStack
    from gpuwatch.datadir import DataDirLock, cluster_root, default_data_dir
    from gpuwatch.embedded_pg import PgServer
    from gpuwatch.inprocess import InProcessReplies, InProcessTransport

    stop = run.stop
    pg: PgServer | None = None
    data_dir = (args.data_dir or default_data_dir()).expanduser().absolute()
    if args.db:
        dsn = args.db
        where, access = "the PostgreSQL given with --db", ""
    else:
        stack.enter_context(DataDirLock(data_dir, "up"))
        pg = PgServer.open(cluster_root(data_dir), tcp=False, die_with_parent=True, orphans=True)
        stack.callback(pg.stop)
        from collector.store.databases import ensure_database

        await ensure_database(pg.dsn("postgres"), "gpuwatch")
        dsn = pg.dsn("gpuwatch")
        where, access = f"embedded PostgreSQL in {pg.root}", f"; its Unix socket only, for {_owner()} alone"
    probe_socket = _probe_socket(settings, data_dir)  # held by another `up --db`: off, unless the path was given
    if probe_socket is not None:
        stack.callback(probe_socket.close)
    try:
        store = await Store.open(dsn, profile=args.db_profile)
    except MigrationError as exc:
        raise UserError(str(exc), code=2) from None
    if pg is not None:
        try:
            await _revoke_left_over_tokens(store.pool)
        except BaseException:
            await store.close()
            raise
    transport = InProcessTransport(asyncio.get_running_loop())  # the agent's producer and the collector's source
    agent_stack = AgentStack(settings, transport, cpu=ThreadCpu(), instance=new_instance_id(),
                             probe_socket=probe_socket)
    replies = InProcessReplies([agent_stack.framer], [agent_stack.profiler])
    from collector.settings import CollectorSettings

    options = CollectorOptions(alert_rules=args.alert_rules,
                               maintenance_s=CollectorSettings.model_fields["maintenance_interval"].default)
    collector = CollectorStack(store, lambda _ingestor: transport, replies, options)

    async def stop_collector(kind: type[BaseException] | None, _exc: BaseException | None,
                             _tb: TracebackType | None) -> bool:
        # a failed start or run does not wait for the drain: what is queued is given up
        await collector.shutdown(SHUTDOWN_S if kind is None else 0.0)
        return False

    stack.push_async_exit(stop_collector)  # the store, detection and (once started) the loop, last
    api = None
    if api_settings is not None:
        port_given = args.api_port is not None or "GPUWATCH_API_PORT" in os.environ

        def taken(port: int, exc: OSError) -> None:
            print(f"gpuwatch up: port {port} is taken ({exc.strerror}); the API takes a free port", file=sys.stderr)

        try:
            api = await collector.start_api(api_settings, port_given, taken=taken,
                                             families=lambda: tuple(collector.detection.families()))
        except OSError as exc:
            raise UserError(f"cannot serve the API on {api_settings.host}:{api_settings.port}: {exc.strerror}; "
                            "choose another --api-port (0: any free port, -1: off)") from exc
    try:
        agent_stack.open()
    except MetricsPortError as exc:
        raise UserError(str(exc)) from exc

    def stop_agent(_kind: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None) -> bool:
        agent_stack.shutdown(SHUTDOWN_S)  # sampling first, then the frames it made, into the queue
        return False

    stack.push(stop_agent)
    agent_stack.start()
    await collector.start()
    kind = "simulated" if settings.simulate else "NVML"
    session_token = None
    secret = ""
    if api is not None and pg is not None:
        # Our own database, on this machine: like a notebook server, this run gets an admin
        # token of its own, shown once on the console (never logged) and revoked at exit.
        from collector.api import tokens

        secret, session_token = await tokens.create(store.pool, "admin", None, name=SESSION_TOKEN_NAME)
        stack.push_async_callback(tokens.revoke, store.pool, session_token.id)
    receiver = agent_stack.receiver
    lines = [f"gpuwatch up: {len(agent_stack.agent.targets)} {kind} GPU targets on {settings.node_name}",
             f"  metrics:  http://{settings.metrics_host}:{agent_stack.server.port}/metrics",
             f"  database: {where} (profile {store.profile}{access})"]
    if api is None:
        lines.append("  API:      off")
    else:
        if args.db:
            token_hint = "--db DSN"
        else:
            token_hint = "" if data_dir == default_data_dir().absolute() else f"--data-dir {data_dir}"
        lines.append(f"  API:      {api.url}/api/v1 (collector metrics {api.url}/metrics; "
                     f"tokens: gpuwatch token create {token_hint + ' ' if token_hint else ''}--role viewer)")
        lines.append(f"  web page: {api.url}/#token={secret}  (this run's admin token, revoked when it stops)"
                     if session_token is not None else f"  web page: {api.url}/")
    lines.append(f"  kernel probe: GPUWATCH_PROBE=1 GPUWATCH_PROBE_SOCKET={receiver.sock.path} python -m probe "
                 "your_script.py" if receiver is not None else "  kernel probe: off")
    if receiver is not None and api is not None:
        lines.append(f"                {api.url}/#/kernels//{quote(UNATTRIBUTED)} (processes outside any pod)")
    print("\n".join(lines), flush=True)

    if args.duration is not None:
        asyncio.get_running_loop().call_later(args.duration, stop.set)
    if pg is not None:
        keeper = asyncio.create_task(_keep_running(pg, collector.stop))

        async def stop_keeper() -> None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

        stack.push_async_callback(stop_keeper)
    run.serving = True
    return collector.ingestor


def run(args: argparse.Namespace) -> int:
    from gpuwatch.cmd_agent import settings_from

    if args.simulate is None and "GPUWATCH_SIMULATE" not in os.environ:
        ok, why = nvml_available()
        if not ok:
            print(f"gpuwatch up: {why}; using 8 simulated GPUs (--simulate N to choose)", file=sys.stderr)
            args.simulate = 8
    settings = settings_from(args)  # a bad setting or flag stops here, before anything starts
    api_settings = _api_settings(args)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from collector import clientlogs

    clientlogs.install()  # asyncpg's pool logs a traceback per reconnect while its server is gone
    return asyncio.run(serve(args, settings, api_settings))
