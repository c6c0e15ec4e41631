"""``gpuwatch collector``: consume telemetry from Kafka and store it in PostgreSQL/TimescaleDB."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

log = logging.getLogger("gpuwatch.collector")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("collector", help="run the central collector")
    p.add_argument("--db", help="PostgreSQL DSN (or GPUWATCH_DB; prefer --db-file for secrets)")
    p.add_argument("--db-file", help="file holding the DSN")
    p.add_argument("--db-profile", choices=["auto", "timescale", "plain"])
    p.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    p.add_argument("--kafka-topic", help="telemetry topic (default gpu.telemetry)")
    p.add_argument("--kafka-group", help="consumer group (default gpuwatch-collector)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--no-detect", dest="detect", action="store_const", const=False,
                   help="store only: no anomaly detection in this replica (or GPUWATCH_DETECT=false)")
    p.add_argument("--api-port", type=int, help="port of the REST API, web page and /metrics (default 8080; -1: off)")
    p.add_argument("--api-host", help="address of the REST API (default 127.0.0.1; 0.0.0.0 in a pod)")
    p.add_argument("--api-tls-cert", help="PEM certificate: serve the API over HTTPS")
    p.add_argument("--api-tls-key", help="PEM key of --api-tls-cert")
    p.add_argument("--price-per-gpu-hour", type=float, help="cost of a GPU-hour in service history (default 2.5)")
    p.add_argument("--alert-rules", metavar="FILE", help="alert rules YAML (or GPUWATCH_ALERT_RULES; default: "
                   "detect and store anomalies, send nothing)")
    p.set_defaults(func=run)


async def serve(settings: Any, api_settings: Any = None, api_port_given: bool = True,
                alert_rules: str | None = None) -> None:
    from collector import positions
    from collector.consumer import KafkaIngest
    from collector.ingest import Ingestor
    from collector.store import Store, validate, validate_event

    store = await Store.open(settings.dsn(), profile=settings.db_profile)
    ingestor = Ingestor(store, dead_letter=_unset_dead_letter, validate=validate, validate_event=validate_event)
    from collector.alerting.service import from_rules_file

    detection = from_rules_file(store.pool, alert_rules)
    if settings.detect:
        ingestor.on_committed = detection.on_committed
    consumer = KafkaIngest(
        ingestor, settings.kafka_bootstrap, settings.kafka_topic, settings.kafka_group,
        load_positions=lambda topic: positions.load(store.pool, topic),
        save_positions=lambda topic, offsets: positions.save(store.pool, topic, offsets),
        max_records=settings.max_batch,
        client_kwargs=settings.kafka_client_security(),
    )
    await consumer.start()
    api = None
    if api_settings is not None:
        from collector.api.context import IngestStats
        from collector.api.server import ApiServer

        stats = IngestStats(counters=lambda: ingestor.counters, lag=lambda: consumer.lag)
        api = ApiServer(store.pool, api_settings, stats)
        try:
            await api.start()
        except OSError as exc:
            if api_port_given:
                raise
            log.warning("the API cannot listen on port %d (%s); using a free port", api_settings.port, exc)
            api = ApiServer(store.pool, api_settings.model_copy(update={"port": 0}), stats)
            await api.start()
        print(f"gpuwatch collector: API on {api.url}/api/v1, web page {api.url}/, metrics {api.url}/metrics",
              flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"gpuwatch collector: consuming {settings.kafka_topic} from {settings.kafka_bootstrap} "
          f"into a {store.profile} PostgreSQL", flush=True)
    runner = asyncio.create_task(consumer.run())
    from collector.periodic import every

    maintainer = asyncio.create_task(every(settings.maintenance_interval, stop, store.maintain, "maintenance"))
    detector = asyncio.create_task(detection.run(stop))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if api is not None:
        await api.stop()
    await consumer.stop()
    stop.set()
    for task in (runner, maintainer, stopper):
        task.cancel()
    await asyncio.gather(runner, maintainer, stopper, detector, return_exceptions=True)
    await detection.close()
    await store.close()
    if runner in done and runner.exception() is not None:
        raise runner.exception()  # type: ignore[misc]


async def _unset_dead_letter(_msg: Any, _reason: str) -> None:
    raise RuntimeError("the consumer replaces this with its dead-letter producer")


def run(args: argparse.Namespace) -> int:
    from agent.settings import SettingsError, load  # the shared settings loader
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
            api_settings = load(ApiSettings, flags, env_prefix="GPUWATCH_API_")
        except SettingsError as exc:
            print(f"gpuwatch collector: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    port_given = args.api_port is not None or "GPUWATCH_API_PORT" in os.environ
    asyncio.run(serve(settings, api_settings, port_given, args.alert_rules or os.environ.get("GPUWATCH_ALERT_RULES")))
    return 0
