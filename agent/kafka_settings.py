"""Where and how the agent produces to Kafka: the settings of the sender and the control listener.

Apart from :mod:`agent.sender` so that settings, the control listener and the command line
can name them without the sender's loop. Secrets never appear in ``repr`` or logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from telemetry.control import DEFAULT_TOPIC
from telemetry.kafka_security import Mechanism, Protocol, check_security, security_config


class KafkaSettings(BaseModel):
    """Where and how the agent produces. Secrets never appear in ``repr`` or logs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str = Field(min_length=1, description="comma-separated host:port list")
    topic: str = Field(default=DEFAULT_TOPIC, min_length=1, description="topic of telemetry frames")
    client_id: str = Field(default="gpuwatch-agent", description="Kafka client id")
    acks: Literal["all"] = Field(
        default="all", description="fixed: a frame counts as sent once all in-sync replicas have it")
    enable_idempotence: bool = Field(
        default=False, description="Kafka's idempotent producer (worth it on real clusters; tansu 0.6.0 refuses it)")
    compression: Literal["zstd", "lz4", "gzip", "none"] = Field(default="zstd", description="batch compression")
    linger_ms: int = Field(default=20, ge=0, le=10_000, description="how long the producer waits to fill a batch")
    max_batch_bytes: int = Field(default=256 << 10, ge=1024, description="producer batch size per partition")
    max_request_bytes: int = Field(default=1 << 20, ge=1024, description="largest produce request (and message)")
    request_timeout_ms: int = Field(default=10_000, ge=100, description="a send not acknowledged in this time failed")
    reconnect_backoff_ms: int = Field(default=500, ge=10, description="first reconnect delay")
    reconnect_backoff_max_ms: int = Field(default=30_000, ge=10, description="reconnect delay ceiling")
    security_protocol: Protocol = "PLAINTEXT"
    ssl_cafile: Path | None = Field(default=None, description="CA bundle that signed the brokers' certificates")
    ssl_certfile: Path | None = Field(default=None, description="client certificate (mutual TLS)")
    ssl_keyfile: Path | None = Field(default=None, description="client key (mutual TLS)")
    ssl_check_hostname: bool = True
    sasl_mechanism: Mechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = Field(
        default=None, description="file holding the SASL password (a mounted Secret)")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            raise ValueError("reconnect_backoff_max_ms must be >= reconnect_backoff_ms")
        check_security(self.security_protocol, self.sasl_username, self.sasl_password, self.sasl_password_file,
                       self.ssl_certfile, self.ssl_keyfile)
        return self

    def producer_config(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer``; reads the password file and TLS files now.

        Called at every (re)connect, so a rotated Secret is picked up without a restart.
        The result holds the password: never log it.
        """
        config: dict[str, Any] = {
            "acks": self.acks,
            "enable_idempotence": self.enable_idempotence,
            "compression_type": None if self.compression == "none" else self.compression,
            "linger_ms": self.linger_ms,
            "max_batch_size": self.max_batch_bytes,
            "max_request_size": self.max_request_bytes,
        }
        return self._client_config() | config

    def consumer_config(self) -> dict[str, Any]:
        """Keyword arguments for the ``AIOKafkaConsumer`` of the control topic, read from its end
        (no consumer group: every agent reads every request and keeps its own)."""
        return self._client_config() | {
            "group_id": None, "enable_auto_commit": False, "auto_offset_reset": "latest",
            "metadata_max_age_ms": 30_000,  # a control topic created after the agent started is found soon
            # a side channel: while the broker is away its client retries every 2 s, not every 0.1 s (at
            # aiokafka's default the retries alone took the transport to 2% of a core during an outage)
            "retry_backoff_ms": 2_000,
        }

    def _client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap_servers": [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()],
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
        }
        return config | security_config(
            self.security_protocol, cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile,
            check_hostname=self.ssl_check_hostname, mechanism=self.sasl_mechanism, username=self.sasl_username,
            password=self.sasl_password, password_file=self.sasl_password_file,
        )
