"""``gpuwatch collector``: consume telemetry from Kafka and store it in PostgreSQL/TimescaleDB."""

from __future__ import annotations

import argparse
import asyncio
import logging
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
    p.set_defaults(func=run)


async def serve(settings: Any) -> None:
    from collector import positions
    from collector.consumer import KafkaIngest
    from collector.ingest import Ingestor
    from collector.store import Store, validate, validate_event

    store = await Store.open(settings.dsn(), profile=settings.db_profile)
    ingestor = Ingestor(store, dead_letter=_unset_dead_letter, validate=validate, validate_event=validate_event)
    consumer = KafkaIngest(
        ingestor, settings.kafka_bootstrap, settings.kafka_topic, settings.kafka_group,
        load_positions=lambda topic: positions.load(store.pool, topic),
        save_positions=lambda topic, offsets: positions.save(store.pool, topic, offsets),
        max_records=settings.max_batch,
    )
    await consumer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"gpuwatch collector: consuming {settings.kafka_topic} from {settings.kafka_bootstrap} "
          f"into a {store.profile} PostgreSQL", flush=True)
    runner = asyncio.create_task(consumer.run())
    maintainer = asyncio.create_task(_maintain(store, settings.maintenance_interval, stop))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    await consumer.stop()
    stop.set()
    for task in (runner, maintainer, stopper):
        task.cancel()
    await asyncio.gather(runner, maintainer, stopper, return_exceptions=True)
    await store.close()
    if runner in done and runner.exception() is not None:
        raise runner.exception()  # type: ignore[misc]


async def _unset_dead_letter(_msg: Any, _reason: str) -> None:
    raise RuntimeError("the consumer replaces this with its dead-letter producer")


async def _maintain(store: Any, interval: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await store.maintain()
        except OSError as exc:
            log.warning("maintenance skipped: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            continue


def run(args: argparse.Namespace) -> int:
    from agent.settings import SettingsError, load  # the shared settings loader
    from collector.settings import CollectorSettings

    keys = CollectorSettings.model_fields
    try:
        settings = load(CollectorSettings, {k: v for k, v in vars(args).items() if k in keys})
    except SettingsError as exc:
        print(f"gpuwatch collector: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings))
    return 0
