"""The API's settings: one pydantic model, from ``GPUWATCH_API_*`` variables and flags.

Why separate from the collector's settings: ``gpuwatch up`` and ``gpuwatch collector``
both serve the API and pass the same few flags; the price and the point limit are also
what an admin reads back from ``GET /api/v1/settings``. ``metrics_auth``
(``GPUWATCH_API_METRICS_AUTH``, off by default for ``gpuwatch up`` and ``gpuwatch collector``,
on in the Helm chart)
and ``metrics_per_service`` (``GPUWATCH_API_METRICS_PER_SERVICE``, on by default) decide
who may read the collector's ``/metrics`` and whether it names services.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUWATCH_API_", extra="forbid", validate_default=True)

    host: str = Field("127.0.0.1", min_length=1, description="address the API listens on")
    port: int = Field(8080, ge=0, le=65535, description="port of the API (0: any free port)")
    price_per_gpu_hour: float = Field(2.5, ge=0, description="cost of one GPU-hour, in the currency of the report")
    currency: str = Field("USD", min_length=1, max_length=8, description="label of the cost figures")
    max_points: int = Field(20_000, ge=100, le=1_000_000, description="most data points one response may carry")
    tls_cert: Path | None = Field(None, description="PEM certificate: serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    cors_origins: list[str] = Field(default_factory=list, description="origins allowed by CORS (none: CORS off)")
    token_cache_seconds: float = Field(10.0, ge=0, le=300, description="how long a checked token is trusted")
    stale_after_seconds: float = Field(
        60.0, gt=0, le=86_400,
        description="a GPU whose newest sample is older than this is 'stale' (six of the agent's 10 s ceilings)")
    metrics_auth: bool = Field(
        False, description="/metrics needs a Bearer token (any role; a namespace-scoped token sees only its "
                           "namespaces' series)")
    metrics_per_service: bool = Field(
        True, description="/metrics lists per-service series (GPUs held, SM active, memory per namespace/service)")

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("set both tls_cert and tls_key, or neither")
        for path in (self.tls_cert, self.tls_key):
            if path is not None and not path.is_file():
                raise ValueError(f"{path} is not a readable file")
        return self
