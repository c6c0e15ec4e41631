"""The database's round trip: ``SELECT 1``, timed, for the collector's ``/metrics``.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
"""

from __future__ import annotations

import time
from typing import Any


async def round_trip(db: Any) -> float:
    """Seconds that ``SELECT 1`` took; raises what the driver raises (see
    :data:`collector.store.errors.TRANSIENT`) when the database does not answer."""
    t0 = time.perf_counter()
    await db.fetchval("SELECT 1")
    return time.perf_counter() - t0
