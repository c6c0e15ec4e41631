"""What every handler needs, held once per app: the database pool, settings, live stats.

Why a plain object on ``app.state``: handlers get it through one FastAPI dependency,
tests build an app over any pool, and nothing here is a module-level global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from collector.api import ids
from collector.api.principal import TokenCache
from collector.api.settings import ApiSettings


@dataclass(slots=True)
class IngestStats:
    """Live figures of the ingest side, read at each ``/metrics`` scrape.

    ``counters`` returns the ingestor's counters (records, events, dead_lettered...),
    ``lag`` the consumer's lag per partition (empty without Kafka), ``families`` the
    consumer's own Prometheus metric families (stalls, retries, keyframe requests...),
    ``not_ready`` why ingest cannot take data yet (``None``: it can; in process, always).
    """

    counters: Callable[[], Mapping[str, int]] = dict
    lag: Callable[[], Mapping[int, int]] = dict
    families: Callable[[], Iterable[Any]] = tuple
    not_ready: Callable[[], str | None] = lambda: None


@dataclass(slots=True)
class ApiContext:
    pool: Any
    settings: ApiSettings
    stats: IngestStats = field(default_factory=IngestStats)
    token_cache: TokenCache = field(default_factory=lambda: TokenCache(10.0))
    id_codec: ids.IdCodec | None = None

    async def codec(self) -> ids.IdCodec:
        """The opaque-id codec, its key read from the database once."""
        if self.id_codec is None:
            self.id_codec = await ids.load(self.pool)
        return self.id_codec


def get_context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx
