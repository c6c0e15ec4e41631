"""The collector takes Kafka TLS/SASL settings the way the agent does (same names, same checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.settings import AgentSettings, SettingsError, load
from collector.settings import CollectorSettings


def test_collector_sasl_from_env_and_a_password_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-from-a-mounted-secret\n")
    monkeypatch.setenv("GPUWATCH_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("GPUWATCH_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("GPUWATCH_KAFKA_SASL_USERNAME", "collector")
    monkeypatch.setenv("GPUWATCH_KAFKA_SASL_PASSWORD_FILE", str(secret))
    settings = load(CollectorSettings, {"db": "postgresql://x@127.0.0.1/db"})
    config = settings.kafka_client_security()
    assert config == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                      "sasl_plain_username": "collector", "sasl_plain_password": "s3cret-from-a-mounted-secret"}
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize("model", [CollectorSettings, AgentSettings])
def test_sasl_without_username_is_refused_by_name(model: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWATCH_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(SettingsError, match="kafka_sasl_username"):
        load(model, {"db": "postgresql://x@127.0.0.1/db"} if model is CollectorSettings else {})


def test_collector_tls_builds_a_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWATCH_KAFKA_SECURITY_PROTOCOL", "SSL")
    config = load(CollectorSettings, {"db": "postgresql://x@127.0.0.1/db"}).kafka_client_security()
    assert config["security_protocol"] == "SSL" and config["ssl_context"].check_hostname
