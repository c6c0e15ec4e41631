"""The sender's calls into aiokafka: a round packed into record batches and sent, a producer closed.

Apart from the loop (:mod:`agent.sender_loop`) so that what talks to the broker is in one
place and the rest of the sender decides on plain values. ``producer`` is an
``AIOKafkaProducer`` or anything with its ``partitions_for``, ``create_batch``,
``send_batch`` and ``send`` (the tests' refusing broker).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, RecordTooLargeError

from agent.batching import REJECTED, PartitionOf
from telemetry.wire import Message

log = logging.getLogger("agent.sender")  # the sender's modules log under one name, as before the split


async def send_all(producer: Any, topic: str, msgs: list[Message],
                   partition_of: PartitionOf) -> list[BaseException | None]:
    """Send a batch; one entry per message: None if acknowledged, else the error.

    Messages are packed into one record batch per partition (more when a batch is full,
    ``max_batch_bytes``), in order, and the batches are queued a wave at a time (first
    batch of every partition, then the second...) so the producer can put all partitions
    in each request. A per-message rejection (a record too large for the broker) is
    resolved by sending that batch's messages one by one.
    """
    results: list[BaseException | None] = [None] * len(msgs)
    try:
        partitions = sorted(await producer.partitions_for(topic))
    except (KafkaError, OSError) as exc:
        return [exc] * len(msgs)
    queues: dict[int, list[tuple[Any, list[int]]]] = {}
    builders: dict[int, tuple[Any, list[int]]] = {}
    for i, msg in enumerate(msgs):
        p = partition_of(msg.key, partitions)
        current = builders.get(p)
        if current is None:
            current = builders[p] = (producer.create_batch(), [])
            queues.setdefault(p, []).append(current)
        headers = list(msg.headers)
        if current[0].append(key=msg.key, value=msg.value, timestamp=None, headers=headers) is None:
            current = builders[p] = (producer.create_batch(), [])
            queues[p].append(current)
            if current[0].append(key=msg.key, value=msg.value, timestamp=None, headers=headers) is None:
                results[i] = RecordTooLargeError(f"{msg.size} bytes do not fit in an empty batch")
                continue
        current[1].append(i)
    sent: list[tuple[int, list[int], asyncio.Future[Any]]] = []
    error: BaseException | None = None
    for wave in itertools.zip_longest(*queues.values()):
        for p, item in zip(queues, wave, strict=True):
            if item is None or not item[1]:
                continue
            builder, members = item
            if error is None:
                try:
                    sent.append((p, members, await producer.send_batch(builder, topic, partition=p)))
                    continue
                except (KafkaError, OSError) as exc:
                    error = exc
            for i in members:
                results[i] = error
    outcomes = await asyncio.gather(*(f for _, _, f in sent), return_exceptions=True)
    singly: list[int] = []
    for (_, members, _), outcome in zip(sent, outcomes, strict=True):
        if isinstance(outcome, REJECTED) and len(members) > 1:
            singly += members
        elif isinstance(outcome, BaseException):
            for i in members:
                results[i] = outcome
    if singly:
        await _send_singly(producer, topic, msgs, sorted(singly), partitions, results, partition_of)
    return results


async def _send_singly(producer: Any, topic: str, msgs: list[Message], indices: list[int],
                       partitions: Sequence[int], results: list[BaseException | None],
                       partition_of: PartitionOf) -> None:
    """Resend messages of rejected batches one per request, to find the one the broker refuses."""
    futures: list[tuple[int, asyncio.Future[Any]]] = []
    for i in indices:
        msg = msgs[i]
        try:
            futures.append((i, await producer.send(topic, msg.value, key=msg.key, headers=list(msg.headers),
                                                   partition=partition_of(msg.key, partitions))))
        except (KafkaError, OSError) as exc:
            results[i] = exc
    outcomes = await asyncio.gather(*(f for _, f in futures), return_exceptions=True)
    for (i, _), outcome in zip(futures, outcomes, strict=True):
        results[i] = outcome if isinstance(outcome, BaseException) else None


async def close_quietly(producer: AIOKafkaProducer, timeout: float = 1.0) -> None:
    try:
        await asyncio.wait_for(producer.stop(), timeout=timeout)
    except (KafkaError, OSError) as exc:  # TimeoutError is an OSError
        log.debug("closing the Kafka producer: %s", exc)
