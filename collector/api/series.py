"""One GPU's metrics over time, for everyone and for namespace-scoped tokens.

Why here rather than :func:`collector.store.queries.gpu_series`: the same buckets, but
PostgreSQL builds the JSON answer (:mod:`collector.store.gpu_series`; an hour of 1-second
points is twice as fast that way), and a token scoped to namespaces may see a GPU's
numbers only for the times a pod of its namespaces held that GPU. Raw samples are kept
when the same sample lists such a process; rollup rows when ``process_samples_1m`` has
such a pod on that GPU in that minute. Hour steps are therefore built from the 1-minute
rollup for scoped tokens (an hour bucket would mix holders). Everyone else gets the
store's choice of raw, 1-minute or 1-hour data, picked from the step
(:func:`collector.store.queries.choose_source`).

Every bucket of the range is answered, from the one holding ``start`` to the last
before ``end``; a bucket without data (an outage, a gap in sampling, a time the
caller's pods did not hold the GPU) is null in every series, so charts break their
lines there instead of drawing straight across.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from collector.api.principal import Principal
from collector.store import gpu_series, queries
from telemetry.keys import FB_USED, GPU_TEMP, POWER_USAGE, SM_ACTIVE

#: The metrics a series answers when none are asked for.
DEFAULT_METRICS: Final[tuple[str, ...]] = (SM_ACTIVE, FB_USED, POWER_USAGE, GPU_TEMP)


def choose(who: Principal, step: timedelta) -> queries.Source:
    """The table to read: the store's choice, except that scoped callers never read hours."""
    source = queries.choose_source(step)
    return "1m" if who.scoped and source == "1h" else source


async def gpu_series_json(
    db: Any, who: Principal, gpu: str, metrics: Sequence[str], start: datetime, end: datetime, step: timedelta,
) -> tuple[queries.Source, str]:
    """``metrics`` of ``gpu`` per ``step`` as JSON text; scoped callers get only the buckets
    their pods held it."""
    source = choose(who, step)
    return source, await gpu_series.series_json(db, gpu, metrics, start, end, step, source, who.scope_param())


async def gpu_visible(db: Any, who: Principal, gpu: str, start: datetime, end: datetime) -> bool:
    """Whether ``gpu`` exists and, for a scoped caller, a pod of its namespaces held it in [start, end)."""
    return await gpu_series.gpu_visible(db, gpu, start, end, who.scope_param())
