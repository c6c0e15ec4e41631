"""The collector's part in CPU profiles: ask when a throughput drop opens, store the answer.

Why here and not in the detectors: detection stays a pure function of the records; this
hangs off the detection service's ``on_opened`` hook (:mod:`collector.alerting.service`),
which hands over each anomaly a flush opened with its row id. For a ``throughput_drop``
:class:`ProfileRequests` records ``requested`` on the anomaly (``anomaly_profiles``) and
sends a :class:`telemetry.control.ProfileRequest` to the GPU's node: over the control topic
(:meth:`collector.replies.KafkaReplies.request_profile`) or in process in ``gpuwatch up``.
Whether the agent profiles is its own setting (off by default); its answer, stacks or the
reason there are none, comes back as a ``profile`` message that the ingest path hands to
:class:`ProfileStore`, and the anomaly then says which.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from collector.detect.anomaly import Anomaly, AnomalyKind
from collector.store import profiles
from telemetry.control import ProfileRequest
from telemetry.profile import ProfileResult

log = logging.getLogger(__name__)

#: the anomaly kinds whose opening asks for a CPU profile
PROFILED: Final[frozenset[AnomalyKind]] = frozenset({"throughput_drop"})
SendRequest = Callable[[ProfileRequest], Awaitable[None]]


class ProfileRequests:
    """The detection service's ``on_opened``: a profile request per opened throughput drop."""

    def __init__(self, pool: Any, send: SendRequest) -> None:
        self.pool = pool
        self.send = send
        self.sent = 0

    async def __call__(self, opened: Sequence[tuple[Anomaly, int]]) -> None:
        wanted = [(a, row) for a, row in opened if a.kind in PROFILED and a.end is None]
        for anomaly, row_id in wanted:
            await profiles.mark_requested(self.pool, row_id, datetime.now(UTC))
            await self.send(ProfileRequest(anomaly.node, anomaly.gpu, row_id, anomaly.start))
            self.sent += 1
            log.info("asked %s for a CPU profile of %s (%s)", anomaly.node, anomaly.gpu, anomaly.kind)


class ProfileStore:
    """Where the ingest path stores the agents' answers (False: no such anomaly on that GPU)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def save(self, result: ProfileResult) -> bool:
        return await profiles.save(self.pool, result)
