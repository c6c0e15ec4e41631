"""``gpuwatch collector``: consume telemetry from Kafka and store it in PostgreSQL/TimescaleDB.

It never exits for bad input or for a dependency that goes away: once connected, the
consumer retries every database step for as long as it takes, and shutdown runs every stop
step even when one fails. At start, a database that is not reachable is waited for up to
``--db-wait`` seconds (one log line, then a count), so a collector that starts before its
database does not crash-loop, while a DSN that points at nothing ends in one line and exit
status 1 instead of waiting for ever. What can never work (a bad setting, a role or database
that does not exist, a wrong password, a profile this database cannot serve) is not waited
for: one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

log = logging.getLogger("gpuwatch.collector")
SHUTDOWN_S = 20.0  # one deadline for every stop: the consumer's and the producer's 10 s each


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("collector", help="run the central collector")
    p.add_argument("--db", help="PostgreSQL DSN (or GPUWATCH_DB; prefer --db-file for secrets)")
    p.add_argument("--db-file", help="file holding the DSN")
    p.add_argument("--db-wait", type=float, metavar="S",
                   help="at start, wait this long for an unreachable database before giving up (default 30)")
    p.add_argument("--db-profile", choices=["auto", "timescale", "plain"],
                   help="storage profile (default auto: TimescaleDB when the extension can be used)")
    p.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    p.add_argument("--kafka-topic", help="telemetry topic (default gpu.telemetry)")
    p.add_argument("--kafka-group", help="consumer group (default gpuwatch-collector)")
    p.add_argument("--fetch-max-wait-ms", type=int, help="longest a broker may hold an empty fetch (default 500)")
    p.add_argument("--fetch-max-bytes", type=int, help="bytes per fetch at most (default 64 MiB)")
    p.add_argument("--max-partition-fetch-bytes", type=int, help="bytes per partition per fetch (default 8 MiB)")
    p.add_argument("--dlq-max-request-size", type=int,
                   help="largest dead-letter message; longer ones are cut to fit (default 1 MiB)")
    p.add_argument("--stall-after-s", type=float,
                   help="a partition with messages waiting that delivers nothing this long is stalled (default 30)")
    p.add_argument("--peer-interval", type=float, metavar="S",
                   help="seconds between this replica's summaries of its serving GPUs on <topic>.peers, which the "
                        "other replicas compare a service's replicas with (default 5; 0: off)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--no-detect", dest="detect", action="store_const", const=False,
                   help="store only: no anomaly detection in this replica (or GPUWATCH_DETECT=false)")
    p.add_argument("--api-port", type=int,
                   help="port of the REST API, web page and /metrics (default 8080, or a free port with a "
                        "warning when 8080 is taken and no port was given; -1: off)")
    p.add_argument("--api-host", help="address of the REST API (default 127.0.0.1; 0.0.0.0 in a pod)")
    p.add_argument("--api-tls-cert", help="PEM certificate: serve the API over HTTPS")
    p.add_argument("--api-tls-key", help="PEM key of --api-tls-cert")
    p.add_argument("--price-per-gpu-hour", type=float, help="cost of a GPU-hour in service history (default 2.5)")
    p.add_argument("--alert-rules", metavar="FILE", help="alert rules YAML (or GPUWATCH_ALERT_RULES; default: "
                   "detect and store anomalies, send nothing)")
    p.set_defaults(func=run)


class ConfigError(Exception):
    """The configuration cannot work (not a transient failure); one line for the user."""


def _never_works(exc: BaseException) -> bool:
    """A connection failure that waiting cannot mend: the login, the database name or the DSN."""
    from collector.store import errors

    return errors.never_works(exc)


async def open_store(settings: Any, stop: asyncio.Event) -> Any:
    """Open the store, waiting up to ``settings.db_wait`` while the database is not reachable;
    None if stopped meanwhile. The last connection error is raised when the wait is over."""
    from collector.store import DB_UNAVAILABLE, MigrationError, Store
    from telemetry.ratelimit import RateLimitedLog

    limited = RateLimitedLog(log)
    delay = 0.5
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + settings.db_wait
    while not stop.is_set():
        opening = asyncio.create_task(Store.open(settings.dsn(), profile=settings.db_profile,
                                                 chunk_interval=settings.chunk_interval))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({opening, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not opening.done():  # stopped while connecting
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            return None
        try:
            store = opening.result()
        except MigrationError as exc:
            raise ConfigError(str(exc)) from None
        except DB_UNAVAILABLE as exc:
            left = give_up_at - loop.time()
            if _never_works(exc) or left <= 0:
                raise
            limited.warning("open", "the database is not reachable (%s: %s); waiting up to %.0f s more for it "
                            "(--db-wait)", type(exc).__name__, exc, left)
            try:
                await asyncio.wait_for(stop.wait(), min(delay, left))
            except TimeoutError:
                delay = min(30.0, delay * 2)
            continue
        limited.resolved("open", "the database is reachable")
        return store
    return None


async def serve(settings: Any, api_settings: Any = None, api_port_given: bool = True,
                alert_rules: str | None = None) -> None:
    """The collector stack on Kafka: a consumer-group member, its dead letters and keyframe requests
    back through Kafka, until SIGTERM or SIGINT."""
    from collector import deadletter
    from collector.consumer import KafkaSource
    from collector.peerlink import PeerLink
    from collector.replies import KafkaReplies
    from collector.store import positions
    from gpuwatch.collector_stack import CollectorOptions, CollectorStack

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store = await open_store(settings, stop)
    if store is None:
        return

    async def record_dead_letter(topic: str, msg: Any, reason: str, why_not_kafka: str) -> None:
        await deadletter.record(store.pool, topic, msg.partition, msg.offset, msg.key, msg.value, msg.headers,
                                reason, why_not_kafka)

    tuning = settings.tuning()
    security = settings.kafka_client_security()
    replies = KafkaReplies(settings.kafka_bootstrap, settings.kafka_topic, record_dead_letter=record_dead_letter,
                           client_kwargs=security, tuning=tuning)
    options = CollectorOptions(detect=settings.detect, alert_rules=alert_rules,
                               maintenance_s=settings.maintenance_interval, checkpoint_s=settings.checkpoint_interval,
                               keyframe_request_interval_s=tuning.keyframe_request_interval_s,
                               stream_idle_s=tuning.stream_idle_s)
    consumer: Any = None

    def source(ingestor: Any) -> Any:
        nonlocal consumer
        consumer = KafkaSource(
            ingestor, replies, settings.kafka_bootstrap, settings.kafka_topic, settings.kafka_group,
            load_positions=lambda topic: positions.load(store.pool, topic),
            save_positions=lambda topic, offsets: positions.save(store.pool, topic, offsets),
            max_records=settings.max_batch, client_kwargs=security, tuning=tuning)
        return consumer

    stack = CollectorStack(store, source, replies, options, stop=stop)
    link = PeerLink(settings.kafka_bootstrap, settings.kafka_topic, stack.detection.engine,
                    every_s=settings.peer_interval, client_kwargs=security) \
        if settings.detect and settings.peer_interval > 0 else None
    try:
        # the API first: while Kafka is not reachable yet (it may start after the collector), /healthz
        # answers (alive), /readyz says why it is not ready, and the stored data can be read
        if api_settings is not None:
            def taken(port: int, exc: OSError) -> None:
                log.warning("the API cannot listen on port %d (%s); using a free port", port, exc)

            def not_ready() -> str | None:
                return None if consumer.joined else f"the consumer has not joined group {consumer.group} yet"

            api = await stack.start_api(api_settings, api_port_given, taken=taken, lag=lambda: consumer.lag,
                                        families=lambda: (*consumer.families(), *stack.detection.families(),
                                                          *(link.families() if link else ())),
                                        not_ready=not_ready)
            print(f"gpuwatch collector: API on {api.url}/api/v1, web page {api.url}/, metrics {api.url}/metrics",
                  flush=True)
        await stack.start()
        if link is not None and stack.runner is not None:
            stack.add_task(link.run(stop), "the peers link", link.shutdown)
        if stack.runner is not None:
            print(f"gpuwatch collector: consuming {settings.kafka_topic} from {settings.kafka_bootstrap} "
                  f"into a {store.profile} PostgreSQL ({store.profile_reason})", flush=True)
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({stack.runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
    finally:
        await stack.shutdown(SHUTDOWN_S)
    failure = stack.failure()
    if failure is not None:
        raise failure


# the API settings whose flag is not ``--setting-name`` (named in setting errors; `up` too)
API_FLAGS = {"port": "--api-port", "host": "--api-host", "tls_cert": "--api-tls-cert", "tls_key": "--api-tls-key"}


def run(args: argparse.Namespace) -> int:
    from agent.settings import SettingsError, load  # the shared settings loader
    from collector import clientlogs
    from collector.settings import CollectorSettings

    keys = CollectorSettings.model_fields
    try:
        settings = load(CollectorSettings, {k: v for k, v in vars(args).items() if k in keys})
    except SettingsError as exc:
        print(f"gpuwatch collector: {exc}", file=sys.stderr)
        return 2
    api_settings = None
    if args.api_port is None or args.api_port >= 0:
        from collector.api.settings import ApiSettings

        flags = {"port": args.api_port, "host": args.api_host, "tls_cert": args.api_tls_cert,
                 "tls_key": args.api_tls_key, "price_per_gpu_hour": args.price_per_gpu_hour}
        try:
            api_settings = load(ApiSettings, flags, env_prefix="GPUWATCH_API_", flags=API_FLAGS)
        except SettingsError as exc:
            print(f"gpuwatch collector: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    clientlogs.install()
    port_given = args.api_port is not None or "GPUWATCH_API_PORT" in os.environ
    rules = args.alert_rules or os.environ.get("GPUWATCH_ALERT_RULES")
    try:
        asyncio.run(serve(settings, api_settings, port_given, rules))
    except ConfigError as exc:
        print(f"gpuwatch collector: {exc}", file=sys.stderr)
        return 2
    return 0
