"""The collector's transport seam: where batches of messages come from, chosen at start.

A :class:`Source` is Kafka (:class:`~collector.consumer.KafkaSource`, a consumer group) in
a cluster, or the in-process queue of ``gpuwatch up`` (``gpuwatch.inprocess``). The one
consume loop (:class:`~collector.loop.ConsumeLoop`) is written against this protocol only:
fetch a batch, store it (retrying while the database is away), then tell the source it is
stored so it can commit. What differs between transports (rebalances, offsets, pausing
partitions) stays behind the protocol.

:class:`Replies` is the way back from the collector to the producers of a source: dead
letters (a message that cannot be decoded or validated) and keyframe requests (a stream
lost its base). They are passed to the :class:`~collector.ingest.Ingestor` when it is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from collector.ingest import Inbound
from telemetry.control import KeyframeRequest


class Source(Protocol):
    """Batches of messages for the consume loop, and what it reports back about them."""

    async def start(self) -> None:
        """Connect (waiting, retrying, while the transport is away)."""

    async def fetch(self) -> list[Inbound] | None:
        """The next batch (empty: nothing yet, ask again); None when the source is finished."""

    def holding(self) -> AbstractAsyncContextManager[object]:
        """Held while one batch is stored and committed (a rebalance waits for it)."""

    async def stored(self, batch: Sequence[Inbound]) -> None:
        """``batch`` is in the database: commit it."""

    def give_up(self) -> str | None:
        """While the database is away: why the batch in hand is to be given up (None: keep retrying)."""

    def abandoned(self, partitions: set[int]) -> None:
        """A batch was given up; the decoders of ``partitions`` were reset."""

    async def database_away(self, exc: BaseException, delay: float) -> None:
        """The database refused the batch: wait ``delay`` (less when :meth:`give_up` would now answer)."""

    def database_back(self) -> None:
        """The database took a batch again."""

    async def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for what was handed over to be fetched (True: nothing left)."""

    async def shutdown(self, timeout: float) -> None:
        """No more fetches: :meth:`fetch` answers None once what must still be stored was handed over."""


class Replies(Protocol):
    """The way back to the producers: dead letters and keyframe requests."""

    async def dead_letter(self, msg: Inbound, reason: str) -> None: ...

    async def request_keyframe(self, request: KeyframeRequest) -> None: ...
