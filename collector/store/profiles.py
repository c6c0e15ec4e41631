"""The ``anomaly_profiles`` table: a CPU profile requested for an anomaly, and the agent's answer.

Why in the store: it is the one way into the database (no SQL outside ``collector/store``).
The collector writes a ``requested`` row when it asks an agent for a profile
(:func:`mark_requested`, once per anomaly), the ingest path fills it in with the answer
(:func:`save`; a redelivered answer overwrites it with the same), and the API reads it
(:func:`get`, with the anomaly's scope). An answer that names an anomaly of another GPU, or
none, is refused (``save`` returns False), so an agent can only attach stacks to its own
GPU's anomalies.

The stacks of every process are stored merged, each under a root frame that names its
process (``pid 4242 python train.py``), so one flame graph shows them side by side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from telemetry.profile import ProfileResult


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One anomaly's profile: status and reason, when, and (captured) the merged folded stacks."""

    anomaly_id: int
    status: str
    reason: str
    requested_at: datetime
    captured_at: datetime | None
    samples: int
    processes: list[dict[str, Any]]
    stacks: list[tuple[str, int]]


async def mark_requested(db: Any, anomaly_id: int, at: datetime) -> None:
    """A profile was asked for (nothing is changed if the anomaly already has a row)."""
    await db.execute("INSERT INTO anomaly_profiles (anomaly_id, status, reason, requested_at) "
                     "VALUES ($1, 'requested', 'asked the agent; no answer yet', $2) "
                     "ON CONFLICT (anomaly_id) DO NOTHING", anomaly_id, at)


def _merged(result: ProfileResult) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for p in result.processes:
        root = f"pid {p.pid}" + (f" {p.command[:120]}" if p.command else "")
        root = root.replace(";", ",")
        out.extend((f"{root};{stack}", n) for stack, n in p.stacks)
    return out


async def save(db: Any, result: ProfileResult) -> bool:
    """Store an agent's answer on its anomaly; False when no anomaly of that id is on that GPU."""
    status, reason = result.overall
    processes = [{"pid": p.pid, "status": p.status, "reason": p.reason, "command": p.command, "samples": p.samples}
                 for p in result.processes]
    stacks = _merged(result)
    row = await db.fetchval(
        "INSERT INTO anomaly_profiles (anomaly_id, status, reason, requested_at, captured_at, samples, processes, "
        "stacks) SELECT a.id, $3, $4, $5, $5, $6, $7::jsonb, $8::jsonb FROM anomalies a WHERE a.id = $1 AND a.gpu = $2 "
        "ON CONFLICT (anomaly_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason, "
        "captured_at = EXCLUDED.captured_at, samples = EXCLUDED.samples, processes = EXCLUDED.processes, "
        "stacks = EXCLUDED.stacks RETURNING anomaly_id",
        result.anomaly, result.gpu, status, reason, datetime.fromtimestamp(result.ts, UTC),
        sum(n for _, n in stacks), json.dumps(processes), json.dumps(stacks))
    return row is not None


_GET: Final = ("SELECT p.anomaly_id, p.status, p.reason, p.requested_at, p.captured_at, p.samples, p.processes, "
               "p.stacks FROM anomaly_profiles p JOIN anomalies a ON a.id = p.anomaly_id WHERE p.anomaly_id = $1")


async def get(db: Any, anomaly_id: int, scope: Sequence[str] | None = None) -> ProfileRow | None:
    """The profile of anomaly ``anomaly_id`` if it has one and the anomaly is in ``scope``
    (None: every namespace)."""
    if scope is None:
        r = await db.fetchrow(_GET, anomaly_id)
    else:
        r = await db.fetchrow(_GET + " AND a.namespace = ANY($2::text[])", anomaly_id, list(scope))
    if r is None:
        return None
    return ProfileRow(int(r["anomaly_id"]), r["status"], r["reason"], r["requested_at"], r["captured_at"],
                      int(r["samples"]), json.loads(r["processes"]),
                      [(str(s), int(n)) for s, n in json.loads(r["stacks"])])


async def anomaly_visible(db: Any, anomaly_id: int, scope: Sequence[str] | None = None) -> bool:
    """Whether anomaly ``anomaly_id`` exists and is in ``scope`` (None: every namespace)."""
    if scope is None:
        return bool(await db.fetchval("SELECT EXISTS (SELECT 1 FROM anomalies WHERE id = $1)", anomaly_id))
    return bool(await db.fetchval(
        "SELECT EXISTS (SELECT 1 FROM anomalies WHERE id = $1 AND namespace = ANY($2::text[]))", anomaly_id,
        list(scope)))
