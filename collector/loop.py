"""The one consume loop of the collector, for every transport (``gpuwatch collector`` and ``up``).

Fetch a batch from the :class:`~collector.source.Source`, hand it to the
:class:`~collector.ingest.Ingestor` (decode, validate, one transaction, dead letters), and
once it is stored tell the source, which commits it. While the database is away the batch
is retried with backoff, forever, unless the source says to give it up (a stop, a
rebalance): then its partitions' decoders are reset and the source re-reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from collector.ingest import Inbound, Ingestor
from collector.source import Source
from collector.store.writer import DB_UNAVAILABLE

log = logging.getLogger(__name__)

DB_MAX_BACKOFF_S = 5.0  # a database retry is cheap; a long wait only delays the catch-up


class ConsumeLoop:
    """Moves batches from one source into the store until the source is finished."""

    def __init__(self, source: Source, ingestor: Ingestor) -> None:
        self.source = source
        self.ingestor = ingestor

    async def run(self) -> None:
        while True:
            batch = await self.source.fetch()
            if batch is None:
                return
            if not batch:
                continue
            async with self.source.holding():
                if await self._store(batch):
                    await self.source.stored(batch)

    async def _store(self, batch: Sequence[Inbound]) -> bool:
        """Handle a batch, retrying while the database is away; False if it was given up."""
        backoff = 0.5
        while True:
            try:
                await self.ingestor.handle(batch)
            except DB_UNAVAILABLE as exc:
                why = self.source.give_up()
                if why is not None:
                    reset = self.ingestor.abandon()
                    self.source.abandoned(reset)
                    log.info("batch given up (%s) while the database is away; partitions %s are re-read",
                             why, sorted(reset) or "-")
                    return False
                await self.source.database_away(exc, backoff)
                backoff = min(DB_MAX_BACKOFF_S, backoff * 2)
                continue
            self.source.database_back()
            return True
