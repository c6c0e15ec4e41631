"""Silences: operator-made windows in which matching alerts are not notified.

Why read-only here: the REST API (operator role) creates and expires silences in the
``silences`` table; the alerting side only asks which are active and whether an alert's
labels match one. A silence matches when every one of its label: value pairs equals the
alert's label (an empty matcher set matches nothing, so a typo cannot mute everything).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from collector.store.alert_tables import active_silences


@dataclass(frozen=True, slots=True)
class Silence:
    id: int
    matchers: tuple[tuple[str, str], ...]
    starts_at: float
    ends_at: float

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def matches(self, labels: dict[str, str]) -> bool:
        return bool(self.matchers) and all(labels.get(k) == v for k, v in self.matchers)


def silenced(silences: Sequence[Silence], labels: dict[str, str], now: float) -> Silence | None:
    return next((s for s in silences if s.active(now) and s.matches(labels)), None)


def _matchers(raw: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


async def load_active(conn: Any, now: datetime) -> list[Silence]:
    """Silences not yet ended at ``now`` (the router checks their start against its own clock)."""
    rows = await active_silences(conn, now)
    return [Silence(int(r["id"]), _matchers(r["matchers"]), r["starts_at"].timestamp(), r["ends_at"].timestamp())
            for r in rows]
