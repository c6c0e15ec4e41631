"""How a gpuwatch process authenticates to Kafka: TLS and SASL, shared by agent and collector.

Why here: the agent produces and the collector consumes on the same cluster, with the
same kinds of credentials, and an operator sets them the same way on both (Helm values
``GPUWATCH_KAFKA_SECURITY_PROTOCOL``, ``GPUWATCH_KAFKA_SASL_PASSWORD_FILE``...). One
model states the settings, checks that they fit together, and turns them into aiokafka
keyword arguments. Secrets: the password is a ``SecretStr`` or, better, a file (a
mounted Kubernetes Secret) read at each (re)connect, so a rotated Secret is picked up
without a restart; neither appears in a ``repr`` or a log line.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def security_config(
    protocol: Protocol,
    *,
    cafile: Path | None = None,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    check_hostname: bool = True,
    mechanism: Mechanism = "PLAIN",
    username: str | None = None,
    password: SecretStr | None = None,
    password_file: Path | None = None,
) -> dict[str, Any]:
    """aiokafka keyword arguments for this security setup; reads the TLS and password files now.

    The result holds the password: never log it.
    """
    config: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        context.check_hostname = check_hostname
        if certfile is not None:
            context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None)
        config["ssl_context"] = context
    if protocol.startswith("SASL"):
        if password_file is not None:
            secret = password_file.read_text().rstrip("\r\n")
        else:
            assert password is not None
            secret = password.get_secret_value()
        config |= {"sasl_mechanism": mechanism, "sasl_plain_username": username, "sasl_plain_password": secret}
    return config


def check_security(
    protocol: Protocol,
    username: str | None,
    password: SecretStr | None,
    password_file: Path | None,
    certfile: Path | None,
    keyfile: Path | None,
    prefix: str = "",
) -> None:
    """Raise ValueError, naming the settings, when they do not fit together."""
    if protocol.startswith("SASL"):
        if not username:
            raise ValueError(f"{prefix}security_protocol {protocol} needs {prefix}sasl_username")
        if (password is None) == (password_file is None):
            raise ValueError(f"give exactly one of {prefix}sasl_password and {prefix}sasl_password_file")
    if keyfile is not None and certfile is None:
        raise ValueError(f"{prefix}ssl_keyfile needs {prefix}ssl_certfile")


class KafkaSecurityFields(BaseModel):
    """The ``kafka_*`` security settings of a process's settings model (mixed into agent and collector)."""

    kafka_security_protocol: Protocol = Field("PLAINTEXT", description="Kafka security protocol")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle of the brokers")
    kafka_ssl_certfile: Path | None = Field(None, description="client certificate (mutual TLS)")
    kafka_ssl_keyfile: Path | None = Field(None, description="client key (mutual TLS)")
    kafka_sasl_mechanism: Mechanism = "PLAIN"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = Field(None, description="prefer kafka_sasl_password_file")
    kafka_sasl_password_file: Path | None = Field(None, description="file holding the SASL password")

    @model_validator(mode="after")
    def _kafka_security_fits(self) -> KafkaSecurityFields:
        check_security(self.kafka_security_protocol, self.kafka_sasl_username, self.kafka_sasl_password,
                       self.kafka_sasl_password_file, self.kafka_ssl_certfile, self.kafka_ssl_keyfile, "kafka_")
        return self

    def kafka_client_security(self) -> dict[str, Any]:
        """aiokafka keyword arguments for these settings (see :func:`security_config`)."""
        return security_config(
            self.kafka_security_protocol, cafile=self.kafka_ssl_cafile, certfile=self.kafka_ssl_certfile,
            keyfile=self.kafka_ssl_keyfile, mechanism=self.kafka_sasl_mechanism,
            username=self.kafka_sasl_username, password=self.kafka_sasl_password,
            password_file=self.kafka_sasl_password_file,
        )
