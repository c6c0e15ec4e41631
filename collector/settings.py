"""The collector's one settings model: environment (``GPUWATCH_*``) and flags.

Kafka's TLS/SASL settings (``kafka_security_protocol``, ``kafka_sasl_password_file``...) are
the agent's, named the same (:class:`telemetry.kafka_security.KafkaSecurityFields`).

The database DSN carries a password in most deployments: it is a ``SecretStr`` (never in
a repr or a log line) and may come from a file (a mounted Kubernetes secret) instead of
the environment.

The consumer's tuning (:class:`ConsumerTuning`) holds the defaults; why each is what it is:

* ``fetch_max_wait_ms`` 500: how long the broker may hold a fetch when it has nothing new.
  Kafka answers as soon as data is there, so on Kafka the wait costs no freshness; tansu
  answers only when the wait expires, so there it adds up to the wait to each frame's
  latency (0.5 s of the 2 s budget). Shorter is worse than it looks: at 50 ms, tansu on
  object storage returned nothing for a partition for minutes (its storage read did not
  finish within the wait), while at 500 ms it returns data.
* ``fetch_max_bytes`` 64 MiB and ``max_partition_fetch_bytes`` 8 MiB: per fetch and per
  partition. An agent's message is at most 1 MiB (its producer's limit), so one
  partition's fetch carries at least 8 of them; a larger, hostile message (up to the
  broker's own limit) can still be fetched and dead-lettered, instead of aiokafka skipping
  it (what it does with a message larger than the partition limit, which the consumer
  then records as a dead letter by reference).
* ``dlq_max_request_size`` 1 MiB: Kafka's default ``message.max.bytes``; a dead letter is
  cut to fit it.
* ``stall_after_s`` 30: a partition with messages waiting that delivered nothing for this
  long is reported stalled (metric and log) and its fetch is restarted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from telemetry.control import DEFAULT_TOPIC
from telemetry.kafka_security import KafkaSecurityFields

MIB: Final = 1 << 20


@dataclass(frozen=True)
class ConsumerTuning:
    """How the Kafka consumer fetches, dead-letters, watches for stalls and asks for keyframes."""

    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 64 * MIB
    max_partition_fetch_bytes: int = 8 * MIB
    dlq_max_request_size: int = MIB
    dlq_timeout_s: float = 15.0  # a dead letter the topic did not take in this time goes to the database
    stall_after_s: float = 30.0
    lag_interval_s: float = 5.0
    keyframe_request_interval_s: float = 10.0
    stream_idle_s: float = 900.0


_T = ConsumerTuning


class CollectorSettings(BaseSettings, KafkaSecurityFields):
    model_config = SettingsConfigDict(env_prefix="GPUWATCH_", extra="forbid", validate_default=True)

    db: SecretStr | None = Field(None, description="PostgreSQL DSN")
    db_file: Path | None = Field(None, description="file holding the PostgreSQL DSN (a mounted secret)")
    db_profile: str = Field("auto", pattern="^(auto|timescale|plain)$", description="schema profile")
    chunk_interval: float | None = Field(None, ge=300, le=7 * 86_400, description="TimescaleDB: seconds of raw "
                                         "samples per chunk, for chunks created from now on (unset: as the database "
                                         "has it, 6 hours at creation). Guidance: a chunk with its indexes, about 510 "
                                         "bytes per GPU-sample, should fit in a quarter of the database's memory "
                                         "(docs/deploy.md)")
    kafka_bootstrap: str = Field("127.0.0.1:9092", min_length=1, description="Kafka bootstrap servers")
    kafka_topic: str = Field(DEFAULT_TOPIC, min_length=1, description="telemetry topic")
    kafka_group: str = Field("gpuwatch-collector", min_length=1, description="consumer group")
    max_batch: int = Field(5000, ge=1, le=100_000, description="messages per batch")
    fetch_max_wait_ms: int = Field(_T.fetch_max_wait_ms, ge=1, le=30_000,
                                   description="longest a broker may hold a fetch that has no data")
    fetch_max_bytes: int = Field(_T.fetch_max_bytes, ge=1024, le=1 << 31, description="bytes per fetch at most")
    max_partition_fetch_bytes: int = Field(_T.max_partition_fetch_bytes, ge=1024, le=1 << 30,
                                           description="bytes per partition per fetch at most")
    dlq_max_request_size: int = Field(_T.dlq_max_request_size, ge=64 * 1024, le=1 << 30,
                                      description="largest dead-letter produce request; longer messages are cut")
    stall_after_s: float = Field(_T.stall_after_s, gt=0, description="seconds without a record from a partition "
                                 "that has messages waiting before it counts as stalled")
    keyframe_request_interval_s: float = Field(_T.keyframe_request_interval_s, gt=0,
                                               description="seconds between keyframe requests for one stream")
    maintenance_interval: float = Field(60.0, gt=0, description="seconds between rollup/retention runs")
    db_wait: float = Field(30.0, ge=0, le=86_400, description="at start, how long to wait for an unreachable "
                           "database before giving up (once connected, every step retries for as long as it takes)")
    checkpoint_interval: float = Field(300.0, ge=5, le=86_400, description="seconds between saves of the "
                                       "detectors' state of every node fed (also saved with each anomaly change, "
                                       "and at a rebalance or a clean stop); a replica that dies re-reads up to this "
                                       "much of its nodes' records")
    log_level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    detect: bool = Field(True, description="run anomaly detection on what this replica stores (off: ingest only, "
                         "for a fleet whose detection runs in replicas of its own)")
    peer_interval: float = Field(5.0, ge=0, le=60, description="seconds between this replica's summaries of its "
                                 "serving GPUs on <kafka_topic>.peers, which the other replicas compare a service's "
                                 "replicas with (0: off; each replica then compares only the replicas it reads)")

    @model_validator(mode="after")
    def _dsn(self) -> CollectorSettings:
        if self.db is None and self.db_file is None:
            raise ValueError("set db (GPUWATCH_DB / --db) or db_file (GPUWATCH_DB_FILE / --db-file)")
        if self.db_file is not None and not self.db_file.is_file():
            raise ValueError(f"db_file {self.db_file} is not a readable file")
        if self.max_partition_fetch_bytes > self.fetch_max_bytes:
            raise ValueError(f"max_partition_fetch_bytes ({self.max_partition_fetch_bytes}) must not exceed "
                             f"fetch_max_bytes ({self.fetch_max_bytes})")
        return self

    def dsn(self) -> str:
        if self.db is not None:
            return self.db.get_secret_value()
        assert self.db_file is not None
        return self.db_file.read_text(encoding="utf-8").strip()

    def tuning(self) -> ConsumerTuning:
        return ConsumerTuning(
            fetch_max_wait_ms=self.fetch_max_wait_ms, fetch_max_bytes=self.fetch_max_bytes,
            max_partition_fetch_bytes=self.max_partition_fetch_bytes, dlq_max_request_size=self.dlq_max_request_size,
            stall_after_s=self.stall_after_s, keyframe_request_interval_s=self.keyframe_request_interval_s,
        )
