"""The alert outbox: notifications stored with the alert change that caused them, sent once.

Why an outbox: a notification decided just before a collector restart must still go out,
and one already sent must not go out again. Enqueueing happens in the same transaction
as the alert rows (:func:`enqueue`), keyed by ``idem_key`` (channel, group, sequence and
part), so a batch processed twice enqueues once. :func:`dispatch` claims one due row at a
time with ``FOR UPDATE SKIP LOCKED``, sends it while holding the lock, and marks it sent
in the same transaction: two replicas never send the same row, and a row is marked sent
only after the receiver said 2xx. The one window left is a crash between that 2xx and the
commit; the row is then sent again after the restart, which PagerDuty (``dedup_key``)
and Alertmanager (same labels) absorb. Rows that fail transiently are retried later with
backoff; after ``max_attempts`` or a permanent 4xx they are marked ``failed`` with the
reason (never the URL).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collector.alerting.delivery import DEFAULT_POLICY, RetryPolicy, Transport, send
from collector.alerting.payloads import bodies
from collector.alerting.router import Notification
from collector.alerting.rules import Channel
from collector.store import alert_tables as tables


@dataclass(frozen=True, slots=True)
class OutboxRow:
    idem_key: str
    channel: str
    payload: Any


def rows_for(notes: Sequence[Notification], channels: dict[str, Channel]) -> list[OutboxRow]:
    out: list[OutboxRow] = []
    for n in notes:
        channel = channels.get(n.channel)
        if channel is None:
            continue
        for i, body in enumerate(bodies(channel.type, n)):
            out.append(OutboxRow(f"{n.idem_key}:{i}", n.channel, body))
    return out


async def enqueue(conn: Any, rows: Sequence[OutboxRow]) -> int:
    """Insert rows (idempotent by ``idem_key``); call inside the caller's transaction."""
    if not rows:
        return 0
    return await tables.enqueue_outbox(conn, [r.idem_key for r in rows], [r.channel for r in rows],
                                       [json.dumps(r.payload) for r in rows])


@dataclass(frozen=True, slots=True)
class DispatchStats:
    sent: int = 0
    failed: int = 0
    deferred: int = 0


async def dispatch(pool: Any, channels: dict[str, Channel], transport: Transport, *,
                   policy: RetryPolicy = DEFAULT_POLICY, max_attempts: int = 10, limit: int = 100,
                   defer_base_s: float = 5.0) -> DispatchStats:
    """Send due rows, one transaction each, until none is due or ``limit`` were tried."""
    sent = failed = deferred = 0
    for _ in range(limit):
        async with pool.acquire() as conn, conn.transaction():
            row = await tables.claim_due(conn)
            if row is None:
                break
            channel = channels.get(row["channel"])
            if channel is None:
                await tables.mark_failed(conn, row["id"], f"channel {row['channel']} is not configured")
                failed += 1
                continue
            payload = row["payload"]
            body = json.loads(payload) if isinstance(payload, str) else payload
            outcome = await asyncio.to_thread(send, channel, body, transport, policy)
            attempts = int(row["attempts"]) + outcome.attempts
            if outcome.ok:
                await tables.mark_sent(conn, row["id"], attempts)
                sent += 1
            elif outcome.permanent or attempts >= max_attempts:
                await tables.mark_failed(conn, row["id"], outcome.error, attempts)
                failed += 1
            else:
                delay = min(3600.0, defer_base_s * 2 ** min(attempts, 10))
                await tables.defer(conn, row["id"], attempts, outcome.error, delay)
                deferred += 1
    return DispatchStats(sent, failed, deferred)
