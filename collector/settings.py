"""The collector's one settings model: environment (``GPUWATCH_*``) and flags.

Kafka's TLS/SASL settings (``kafka_security_protocol``, ``kafka_sasl_password_file``...) are
the agent's, named the same (:class:`telemetry.kafka_security.KafkaSecurityFields`).

The database DSN carries a password in most deployments: it is a ``SecretStr`` (never in
a repr or a log line) and may come from a file (a mounted Kubernetes secret) instead of
the environment.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from telemetry.kafka_security import KafkaSecurityFields


class CollectorSettings(BaseSettings, KafkaSecurityFields):
    model_config = SettingsConfigDict(env_prefix="GPUWATCH_", extra="forbid", validate_default=True)

    db: SecretStr | None = Field(None, description="PostgreSQL DSN")
    db_file: Path | None = Field(None, description="file holding the PostgreSQL DSN (a mounted secret)")
    db_profile: str = Field("auto", pattern="^(auto|timescale|plain)$", description="schema profile")
    kafka_bootstrap: str = Field("127.0.0.1:9092", min_length=1, description="Kafka bootstrap servers")
    kafka_topic: str = Field("gpu.telemetry", min_length=1, description="telemetry topic")
    kafka_group: str = Field("gpuwatch-collector", min_length=1, description="consumer group")
    max_batch: int = Field(5000, ge=1, le=100_000, description="messages per batch")
    maintenance_interval: float = Field(60.0, gt=0, description="seconds between rollup/retention runs")
    log_level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    detect: bool = Field(True, description="run anomaly detection on what this replica stores (off: ingest only, "
                         "for a fleet whose detection runs in replicas of its own)")

    @model_validator(mode="after")
    def _dsn(self) -> CollectorSettings:
        if self.db is None and self.db_file is None:
            raise ValueError("set db (GPUWATCH_DB / --db) or db_file (GPUWATCH_DB_FILE / --db-file)")
        if self.db_file is not None and not self.db_file.is_file():
            raise ValueError(f"db_file {self.db_file} is not a readable file")
        return self

    def dsn(self) -> str:
        if self.db is not None:
            return self.db.get_secret_value()
        assert self.db_file is not None
        return self.db_file.read_text(encoding="utf-8").strip()
