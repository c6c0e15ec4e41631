"""Turning a batch of transport messages into stored rows, dead letters and a resume point.

Transport-neutral: the Kafka consumer and the in-process queue of ``gpuwatch up`` both
hand batches of :class:`Inbound` here. For each message:

* ``type=frame``: routed by its header's GPU to that GPU's decoder (one per partition and
  GPU); records are validated; a frame that fails either goes to the dead-letter sink
  with the reason, and never blocks the rest;
* ``type=event``: JSON of an :class:`~telemetry.records.EventRecord`;
* anything else: dead-lettered.

Frames are deltas against the previous frame of the same GPU, so a consumer that starts
mid-stream (after a restart or a rebalance) rewinds to the last keyframe of every GPU in
the partition (:attr:`Ingestor.resume_offsets`, persisted after each batch) and decodes
forward; writes are idempotent, so what is decoded twice is stored once. A delta frame
before any keyframe at an offset already stored is skipped; past that it is dead-lettered.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from telemetry.codec import FrameDecoder, FrameError, peek_header
from telemetry.records import EventRecord, GpuRecord

log = logging.getLogger(__name__)
_SEQ_MASK = 0xFFFFFFFF  # frame sequence numbers are u32 and wrap
_SEQ_HALF = 1 << 31


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message as the collector receives it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> bytes | None:
        for n, v in self.headers:
            if n == name:
                return v
        return None


class RecordStore(Protocol):
    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> Any: ...


def _validate_noop(_record: GpuRecord) -> None:
    return None


def _validate_event_noop(_event: EventRecord) -> None:
    return None


DeadLetter = Callable[[Inbound, str], Awaitable[None]]


@dataclass(slots=True)
class _GpuStream:
    decoder: FrameDecoder
    keyframe_offset: int | None = None  # offset of the last keyframe decoded
    last_offset: int = -1


@dataclass(slots=True)
class BatchResult:
    records: int = 0
    events: int = 0
    dead: int = 0
    skipped: int = 0
    written: Any = None
    newest_ts: float | None = None


Frames = list[tuple[Inbound, list[GpuRecord]]]
Events = list[tuple[Inbound, EventRecord]]
Prepared = tuple[BatchResult, Frames, Events, list[tuple[Inbound, str]]]


@dataclass(slots=True)
class Ingestor:
    store: RecordStore
    dead_letter: DeadLetter
    validate: Callable[[GpuRecord], None] = _validate_noop
    validate_event: Callable[[EventRecord], None] = _validate_event_noop
    counters: Counter[str] = field(default_factory=Counter)
    # offsets already stored per partition (from the last commit): below them, undecodable
    # deltas are expected after a rewind and are skipped rather than dead-lettered
    stored_below: dict[int, int] = field(default_factory=dict)
    # called with each batch's records and events after the store committed them (detection)
    on_committed: Callable[[Sequence[GpuRecord], Sequence[EventRecord]], None] | None = None
    _streams: dict[tuple[int, str], _GpuStream] = field(default_factory=dict)
    # the decoded form of a batch whose write failed, reused when the caller retries it
    _prepared: tuple[tuple[int, int, int, int], Prepared] | None = None

    def reset_partition(self, partition: int, stored_below: int | None) -> None:
        """Forget decoder state of a partition (before a rewind or after a revoke)."""
        for key in [k for k in self._streams if k[0] == partition]:
            del self._streams[key]
        self._prepared = None
        if stored_below is None:
            self.stored_below.pop(partition, None)
        else:
            self.stored_below[partition] = stored_below

    def resume_offsets(self) -> dict[int, int]:
        """Per partition, the offset to re-read from so every GPU's decoder can be rebuilt."""
        out: dict[int, int] = {}
        for (partition, _gpu), stream in self._streams.items():
            if stream.keyframe_offset is None:
                continue
            cur = out.get(partition)
            out[partition] = stream.keyframe_offset if cur is None else min(cur, stream.keyframe_offset)
        return out

    async def handle(self, batch: Sequence[Inbound]) -> BatchResult:
        """Decode, validate and store a batch; raises only if the store fails.

        Nothing is lost then: the caller retries the *same* batch, and the retry reuses what
        this call decoded (decoders have moved past these frames; decoding them again would
        find delta frames without their base).
        """
        key = (len(batch), batch[0].partition, batch[0].offset, batch[-1].offset) if batch else (0, 0, 0, 0)
        if self._prepared is not None and self._prepared[0] == key:
            result, frames, events, dead = self._prepared[1]
        else:
            result, frames, events, dead = self._prepare(batch)
        try:
            try:
                records = [r for _, decoded in frames for r in decoded]
                result.written = await self.store.write(records, [e for _, e in events])
            except ValueError:
                # The store refused a record before touching the database (it validates each
                # one anyway, so the happy path validates once); find the frames to set aside.
                frames, events = self._drop_invalid(frames, events, dead)
                records = [r for _, decoded in frames for r in decoded]
                result.written = await self.store.write(records, [e for _, e in events])
        except BaseException:
            self._prepared = (key, (result, frames, events, dead))
            raise
        self._prepared = None
        if self.on_committed is not None:
            self.on_committed(records, [e for _, e in events])
        for msg, reason in dead:
            await self.dead_letter(msg, reason)
            self.counters["dead_lettered"] += 1
        result.records, result.events, result.dead = len(records), len(events), len(dead)
        result.newest_ts = max((r.ts for r in records), default=None)
        self.counters["records"] += len(records)
        self.counters["events"] += len(events)
        self.counters["frames_skipped"] += result.skipped
        return result

    def _drop_invalid(self, frames: Frames, events: Events, dead: list[tuple[Inbound, str]]) -> tuple[Frames, Events]:
        good_frames: Frames = []
        for msg, decoded in frames:
            try:
                for record in decoded:
                    self.validate(record)
            except ValueError as exc:
                dead.append((msg, f"invalid record: {exc}"))
                continue
            good_frames.append((msg, decoded))
        good_events: Events = []
        for msg, event in events:
            try:
                self.validate_event(event)
            except ValueError as exc:
                dead.append((msg, f"invalid event: {exc}"))
                continue
            good_events.append((msg, event))
        return good_frames, good_events

    def _prepare(self, batch: Sequence[Inbound]) -> Prepared:
        result = BatchResult()
        frames: Frames = []
        events: Events = []
        dead: list[tuple[Inbound, str]] = []
        for msg in batch:
            kind = msg.header("type")
            if kind == b"frame" or kind is None:
                self._frame(msg, frames, dead, result)
            elif kind == b"event":
                try:
                    events.append((msg, _parse_event(msg.value)))
                except ValueError as exc:
                    dead.append((msg, f"bad event: {exc}"))
            else:
                dead.append((msg, f"unknown message type {kind!r}"))
        return result, frames, events, dead

    def _frame(self, msg: Inbound, frames: Frames, dead: list[tuple[Inbound, str]], result: BatchResult) -> None:
        try:
            header = peek_header(msg.value)
        except FrameError as exc:
            dead.append((msg, f"undecodable frame: {exc}"))
            return
        key = (msg.partition, header.gpu)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _GpuStream(FrameDecoder())
        if msg.offset <= stream.last_offset:
            result.skipped += 1  # redelivered within this consumer's life: already decoded
            return
        if not header.keyframe and stream.decoder.expected_seq is None \
                and msg.offset < self.stored_below.get(msg.partition, -1):
            stream.last_offset = msg.offset
            result.skipped += 1  # a delta before this GPU's keyframe, already stored before a rewind
            return
        expected = stream.decoder.expected_seq
        if not header.keyframe and expected is not None and 0 < ((expected - header.seq) & _SEQ_MASK) < _SEQ_HALF:
            result.skipped += 1  # a frame delivered twice (a producer retry after a broker died mid-request)
            self.counters["duplicate_frames"] += 1
            return
        try:
            decoded = stream.decoder.decode_checked(msg.value, header)
        except FrameError as exc:
            dead.append((msg, f"undecodable frame: {exc}"))
            return
        stream.last_offset = msg.offset
        if header.keyframe:
            stream.keyframe_offset = msg.offset
        frames.append((msg, decoded))


def _parse_event(value: bytes) -> EventRecord:
    try:
        obj = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    for key, typ in (("ts", (int, float)), ("node", str), ("gpu", str), ("kind", str)):
        if not isinstance(obj.get(key), typ) or isinstance(obj.get(key), bool):
            raise ValueError(f"field {key!r} missing or of the wrong type")
    code = obj.get("code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise ValueError("field 'code' must be an integer")
    detail = obj.get("detail", "")
    if not isinstance(detail, str):
        raise ValueError("field 'detail' must be a string")
    return EventRecord(float(obj["ts"]), obj["node"], obj["gpu"], obj["kind"], code, detail)
