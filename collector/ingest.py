"""Turning a batch of transport messages into stored rows, dead letters and keyframe requests.

Transport-neutral: the Kafka consumer and the in-process queue of ``gpuwatch up`` both
hand batches of :class:`Inbound` here. For each message:

* ``type=frame``: routed to its stream's decoder (:mod:`collector.streams`: one per node,
  agent instance and GPU); records are validated; a frame that fails either goes to the
  dead-letter sink with the reason, and never blocks the rest;
* ``type=event``: JSON of an :class:`~telemetry.records.EventRecord`;
* ``type=profile``: an agent's CPU profile for an anomaly (:class:`~telemetry.profile.ProfileResult`),
  stored on that anomaly by :attr:`Ingestor.profiles` once the batch's records are; one that
  names no anomaly of its GPU is dead-lettered;
* ``type=kernels``: one window of a CUPTI probe's kernel statistics
  (:class:`~telemetry.kernels.KernelWindow`), stored by :attr:`Ingestor.kernels` in the same
  flush, after the batch's records (so offsets are committed only once it is stored); one that
  does not decode, or that the store refuses, is counted (``bad_kernels``) and dead-lettered
  with the field named;
* anything else: dead-lettered.

Frames are deltas against the previous frame of the same stream. A consumer that starts
mid-stream (a restart, a rebalance) rewinds to the last keyframe of every stream in the
partition (:meth:`Ingestor.resume_offsets`, persisted after each batch) and decodes
forward; writes are idempotent, so what is decoded twice is stored once. Everything below
:attr:`Ingestor.stored_below` (the partition's committed offset) was handled before: there,
a delta without its base and a message that cannot be read are skipped, not dead-lettered
(again). Past it, a delta whose base is missing (before any keyframe, after a sequence
gap) is dead-lettered and its agent is asked for a keyframe (:data:`RequestKeyframe`, at
most once per stream every ``keyframe_request_interval_s``); the next keyframe is taken at
once. Duplicates (a frame delivered twice) are recognised by sequence number and time.

A batch whose write fails (database away) raises; the caller retries the same batch and
this module resumes it where it stopped: decoding is not repeated (decoders have moved
past these frames), dead letters already sent are not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from collector.batch_slices import slices
from collector.streams import NODE_STREAM, Stream, StreamId, StreamTable, UuidConflicts, seq_behind
from telemetry.codec import FrameDecoder, FrameError, FrameHeader, peek_header
from telemetry.codec.node import NodeFrameDecoder, is_node_frame, peek_node_header
from telemetry.control import KeyframeRequest
from telemetry.kernels import KernelWindow
from telemetry.profile import ProfileResult
from telemetry.ratelimit import RateLimitedLog
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import INSTANCE_HEADER, NODE_HEADER, TYPE_HEADER, Headers, MessageType, decode_event

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_limited = RateLimitedLog(log)

#: the kind of the event recorded when one GPU UUID is reported by two nodes at once
UUID_CONFLICT_KIND = "gpu_uuid_conflict"


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message as the collector receives it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: Headers = ()

    def header(self, name: str) -> bytes | None:
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def header_text(self, name: str) -> str | None:
        """A UTF-8 header's text; None when absent, empty or not UTF-8."""
        raw = self.header(name)
        if not raw:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None


class RecordStore(Protocol):
    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> Any: ...


class ProfileSink(Protocol):
    async def save(self, result: ProfileResult) -> bool:
        """Store ``result`` on its anomaly; False when there is no such anomaly on its GPU."""


class KernelSink(Protocol):
    async def save(self, windows: Sequence[KernelWindow]) -> int:
        """Store ``windows`` (idempotently); how many were new. :class:`ValueError` when one is
        refused (the message names the field), the driver's errors when the database is away."""


def _validate_noop(_record: GpuRecord) -> None:
    return None


def _validate_event_noop(_event: EventRecord) -> None:
    return None


DeadLetter = Callable[[Inbound, str], Awaitable[None]]
#: Deliver a keyframe request to the agent that can answer it (the Kafka control topic, or in
#: process in ``gpuwatch up``). A request is a hint (the scheduled keyframe still comes), so it
#: must not raise: a delivery problem is the callable's to count and log.
RequestKeyframe = Callable[[KeyframeRequest], Awaitable[None]]


class DetectionHooks(Protocol):
    """What the detection service does around a batch and a rebalance
    (:class:`collector.alerting.service.DetectionService`)."""

    async def prepare(self, records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
        """Before a batch is judged: take over the saved state of nodes new to this process."""

    async def release(self, nodes: set[str]) -> None:
        """Before a rebalance: save the state of ``nodes``."""

    def forget(self, nodes: set[str]) -> None:
        """After one: drop ``nodes``, another replica judges them now."""

    def judging(self) -> asyncio.Lock:
        """Held while a batch is judged slice by slice: a save between two slices would keep a
        node's state from the middle of a batch whose floors it had already taken."""


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
Profiles = list[tuple[Inbound, ProfileResult]]
Kernels = list[tuple[Inbound, KernelWindow]]


JUDGE_SLICE = 4000  # records the detectors judge between two turns of the event loop (about 0.2 s)
DECODE_SLICE = 500  # messages decoded between two turns (node frames of 8 GPUs: about 0.2 s)


@dataclass(slots=True)
class _Pending:
    """A batch on its way: decoded once, then written, then its dead letters sent."""

    key: tuple[int, int, int, int]
    partitions: set[int]
    result: BatchResult
    frames: Frames = field(default_factory=list)
    events: Events = field(default_factory=list)
    profiles: Profiles = field(default_factory=list)
    kernels: Kernels = field(default_factory=list)
    dead: list[tuple[Inbound, str]] = field(default_factory=list)
    requests: list[KeyframeRequest] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)  # the streams that decoded frames of this batch
    # node -> (partition, offset) of the earliest keyframe its frames here were decoded from: where a re-read
    # must begin to judge them again (a re-read from a delta frame skips it and what follows to a keyframe)
    bases: dict[str, tuple[int, int]] = field(default_factory=dict)
    written: bool = False
    dead_sent: int = 0


def _batch_key(batch: Sequence[Inbound]) -> tuple[int, int, int, int]:
    return (len(batch), batch[0].partition, batch[0].offset, batch[-1].offset) if batch else (0, 0, 0, 0)


@dataclass(slots=True)
class Ingestor:
    store: RecordStore
    dead_letter: DeadLetter
    validate: Callable[[GpuRecord], None] = _validate_noop
    validate_event: Callable[[EventRecord], None] = _validate_event_noop
    counters: Counter[str] = field(default_factory=Counter)
    # offsets already handled per partition (its committed offset): below them, what cannot
    # be decoded is expected after a rewind, or was dead-lettered before, and is skipped
    stored_below: dict[int, int] = field(default_factory=dict)
    # called with each batch's records and events after the store committed them (detection)
    on_committed: Callable[[Sequence[GpuRecord], Sequence[EventRecord]], None] | None = None
    detection: DetectionHooks | None = None  # detector state handed over with partitions
    partition_nodes: dict[int, set[str]] = field(default_factory=dict)  # the nodes each partition carried
    # node -> (partition, offset) of the keyframe its first frame judged since the detectors last saved its
    # state was decoded from: the resume offset goes no later, so a replica taking the node over re-reads
    # what the state lacks (from that frame's own offset, a delta, the re-read could decode nothing up to
    # the stream's next keyframe: a minute of frames, never judged)
    floors: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the floors of the nodes whose state is being saved: they hold the resume offset back until the save
    # has committed (a replica killed mid-save leaves the older state, which needs them)
    saving: dict[str, tuple[int, int]] = field(default_factory=dict)
    request_keyframe: RequestKeyframe | None = None
    judge_slice: int = JUDGE_SLICE
    decode_slice: int = DECODE_SLICE
    profiles: ProfileSink | None = None  # where agents' CPU profiles go (None: they are dead-lettered)
    kernels: KernelSink | None = None  # where CUPTI kernel windows go (None: they are dead-lettered)
    keyframe_request_interval_s: float = 10.0
    stream_idle_s: float = 900.0
    clock: Callable[[], float] = time.monotonic
    streams: StreamTable = field(default_factory=StreamTable)
    conflicts: UuidConflicts = field(default_factory=UuidConflicts)
    _requested: dict[StreamId, float] = field(default_factory=dict)  # stream -> clock() of its last request
    _pending: _Pending | None = None

    # ---- partitions ----
    async def release(self, partitions: set[int]) -> None:
        """Before ``partitions`` are revoked: the detectors save the state of the nodes they carried,
        for whichever replica gets them next. A failure costs that replica the newest state only."""
        nodes = set().union(*(self.partition_nodes.get(p, set()) for p in partitions))
        if self.detection is None or not nodes:
            return
        try:
            await self.detection.release(nodes)
        except Exception as exc:  # noqa: BLE001 - a rebalance must go on: the last periodic save stands
            self.counters["state_release_errors"] += 1
            _limited.warning("release", "detector state of %d nodes not saved before a rebalance (%s: %s)",
                             len(nodes), type(exc).__name__, exc)

    def take_floors(self, nodes: set[str]) -> dict[str, tuple[int, int]]:
        """The detectors are saving ``nodes``' state: their floors. Until the save commits
        (:meth:`saved_floors`) or fails (:meth:`put_floors`) they still hold the resume offset back,
        and what is judged meanwhile gets a floor of its own (the saved state lacks it). Why: the
        resume offsets are saved after every batch, also while a save is in flight; had they moved
        past the floors then, a replica killed before its save committed left an older state and a
        resume offset past what that state lacks, and whoever took its nodes over never read it."""
        taken = {n: self.floors.pop(n) for n in nodes if n in self.floors}
        self.saving.update(taken)
        return taken

    def saved_floors(self, floors: dict[str, tuple[int, int]]) -> None:
        for node in floors:
            self.saving.pop(node, None)

    def put_floors(self, floors: dict[str, tuple[int, int]]) -> None:
        for node, (partition, offset) in floors.items():
            self.saving.pop(node, None)
            cur = self.floors.get(node)
            if cur is None or offset < cur[1]:
                self.floors[node] = (partition, offset)

    def reset_partition(self, partition: int, stored_below: int | None) -> None:
        """Forget a partition's decoders and its nodes' detector state: before a rewind, or when it
        went to another collector (``stored_below`` None). Before a rewind too, because the rewind
        is of a partition that another collector read further (or whose batch was given up): what
        the detectors hold of its nodes is older than the state saved since, and a node they still
        held would not take that state over (the real case: a replica that read a partition for a
        moment at the group's first rebalance re-opened, when the partition came back after a
        replica was killed, every anomaly that replica had open, with a later start)."""
        nodes = self.partition_nodes.pop(partition, set())
        for node in nodes:
            self.floors.pop(node, None)
            self.saving.pop(node, None)
        if self.detection is not None and nodes:
            self.detection.forget(nodes)
        self.streams.drop_partition(partition)
        if self._pending is not None and partition in self._pending.partitions:
            self._pending = None
        if stored_below is None:
            self.stored_below.pop(partition, None)
        else:
            self.stored_below[partition] = stored_below

    def mark_stored(self, partition: int, below: int) -> None:
        """Everything of ``partition`` below ``below`` is handled (only ever moves forward)."""
        if below > self.stored_below.get(partition, -1):
            self.stored_below[partition] = below

    def abandon(self) -> set[int]:
        """Give up the batch in progress (a rebalance or shutdown while the database is away).

        If it was not written, its partitions' decoders are past frames that were never
        stored: they are reset, so the next read rebuilds them from the resume offset.
        Returns the partitions reset.
        """
        pending, self._pending = self._pending, None
        if pending is None or pending.written:
            return set()
        for partition in pending.partitions:
            self.streams.drop_partition(partition)
        return pending.partitions

    def resume_offsets(self) -> dict[int, int]:
        """Per partition, the offset to re-read from so every stream's decoder can be rebuilt."""
        self.streams.expire(self.clock(), self.stream_idle_s)
        out = self.streams.resume_offsets()
        for partition, offset in (*self.floors.values(), *self.saving.values()):
            out[partition] = min(offset, out.get(partition, offset))
        return out

    # ---- a batch ----
    async def handle(self, batch: Sequence[Inbound]) -> BatchResult:
        """Decode, validate and store a batch; raises only if the store or the dead-letter sink fails.

        Nothing is lost then: the caller retries the *same* batch, and the retry resumes
        what this call began.
        """
        key = _batch_key(batch)
        pending = self._pending
        if pending is None or pending.key != key:
            pending = _Pending(key, {m.partition for m in batch}, BatchResult())
            step = self.decode_slice
            for i in range(0, len(batch), step):
                if i:
                    await asyncio.sleep(0)  # (the heartbeats: a 5,000-frame batch decodes for seconds)
                self._read(batch[i:i + step], pending)
            self._pending = pending
        if not pending.written:
            await self._write(pending)
            await self._save_profiles(pending)
            await self._save_kernels(pending)
            pending.written = True
            now = self.clock()
            for stream in pending.streams:  # a long outage must not make them look gone
                stream.last_used = now
            await self._prepare_detection(pending)
            await self._notify(pending)
        while pending.dead_sent < len(pending.dead):
            msg, reason = pending.dead[pending.dead_sent]
            await self.dead_letter(msg, reason)
            pending.dead_sent += 1
            self.counters["dead_lettered"] += 1
        self._pending = None
        await self._send_requests(pending.requests)
        result = pending.result
        records = [r for _, decoded in pending.frames for r in decoded]
        result.records, result.events, result.dead = len(records), len(pending.events), len(pending.dead)
        result.newest_ts = max((r.ts for r in records), default=None)
        self.counters["records"] += len(records)
        self.counters["events"] += len(pending.events)
        self.counters["frames_skipped"] += result.skipped
        return result

    async def _write(self, pending: _Pending) -> None:
        records = [r for _, decoded in pending.frames for r in decoded]
        events = [e for _, e in pending.events]
        try:
            pending.result.written = await self.store.write(records, events)
            return
        except ValueError:
            # The store refused something (it validates every record before touching the
            # database, so the happy path validates once): find what to set aside.
            pass
        self._drop_invalid(pending)
        records = [r for _, decoded in pending.frames for r in decoded]
        events = [e for _, e in pending.events]
        try:
            pending.result.written = await self.store.write(records, events)
        except ValueError:
            # valid records, yet refused by the database: isolate the frames it refuses
            pending.result.written = await self._write_one_by_one(pending)

    async def _save_profiles(self, pending: _Pending) -> None:
        for msg, result in pending.profiles:
            if self.profiles is None:
                self._reject(msg, "profile message: this collector stores no profiles", pending)
            elif await self.profiles.save(result):
                self.counters["profiles"] += 1
            else:
                self._reject(msg, f"profile for anomaly {result.anomaly} of {result.gpu}: no such anomaly on that "
                             "GPU", pending)
        pending.profiles = []  # a retry of this batch does not store them again

    async def _save_kernels(self, pending: _Pending) -> None:
        if not pending.kernels:
            return
        if self.kernels is None:
            for msg, _ in pending.kernels:
                self._reject(msg, "kernels message: this collector stores no kernel windows", pending)
            pending.kernels = []
            return
        try:
            self.counters["kernel_windows"] += await self.kernels.save([w for _, w in pending.kernels])
        except ValueError:  # one of them refused: store the others one by one, set it aside
            while pending.kernels:  # what is done leaves the list: a retry after an outage resumes here
                msg, window = pending.kernels[0]
                try:
                    self.counters["kernel_windows"] += await self.kernels.save([window])
                except ValueError as exc:
                    self.counters["bad_kernels"] += 1
                    self._reject(msg, f"kernels window refused by the store: {exc}", pending)
                pending.kernels = pending.kernels[1:]
        pending.kernels = []  # a retry of this batch does not store them again

    async def _write_one_by_one(self, pending: _Pending) -> Any:
        written: Any = None
        kept: Frames = []
        for msg, decoded in pending.frames:
            try:
                done = await self.store.write(decoded)
            except ValueError as exc:
                pending.dead.append((msg, f"refused by the database: {exc}"))
                continue
            kept.append((msg, decoded))
            written = done if written is None else written + done
        kept_events: Events = []
        for msg, event in pending.events:
            try:
                done = await self.store.write((), [event])
            except ValueError as exc:
                pending.dead.append((msg, f"event refused by the database: {exc}"))
                continue
            kept_events.append((msg, event))
            written = done if written is None else written + done
        pending.frames, pending.events = kept, kept_events
        return written

    async def _prepare_detection(self, pending: _Pending) -> None:
        if self.detection is None:
            return
        try:
            await self.detection.prepare([r for _, decoded in pending.frames for r in decoded],
                                         [e for _, e in pending.events])
        except Exception as exc:  # noqa: BLE001 - detection must never stop ingest: the rows are stored
            self.counters["detection_errors"] += 1
            _limited.error("prepare", "detector state not taken over (%s: %s); ingest goes on",
                           type(exc).__name__, exc)

    async def _notify(self, pending: _Pending) -> None:
        """Hand the stored batch to the detectors, a slice at a time with the event loop free between
        slices (:mod:`collector.batch_slices`: a whole batch held it for seconds, and the Kafka
        client's heartbeats with it)."""
        if self.on_committed is None:
            return
        if self.detection is not None:
            floors = self.floors
            for node, base in pending.bases.items():
                if node not in floors:
                    floors[node] = base
        records = [r for _, decoded in pending.frames for r in decoded]
        parts = slices(records, [e for _, e in pending.events], self.judge_slice)
        if len(parts) == 1:
            self._judge(*parts[0])
            return
        async with self.detection.judging() if self.detection is not None else contextlib.nullcontext():
            for i, (part, events) in enumerate(parts):
                if i:
                    await asyncio.sleep(0)
                self._judge(part, events)

    def _judge(self, records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
        assert self.on_committed is not None
        try:
            self.on_committed(records, events)
        except Exception as exc:  # detection must never stop ingest: the rows are stored
            self.counters["detection_errors"] += 1
            _limited.error("detect", "anomaly detection failed on a stored batch (%s: %s); ingest goes on",
                           type(exc).__name__, exc)
            log.debug("detection failure", exc_info=True)

    async def _send_requests(self, requests: list[KeyframeRequest]) -> None:
        if self.request_keyframe is None:
            return
        for request in requests:
            await self.request_keyframe(request)
            self.counters["keyframe_requests"] += 1

    def _drop_invalid(self, pending: _Pending) -> None:
        good_frames: Frames = []
        for msg, decoded in pending.frames:
            try:
                for record in decoded:
                    self.validate(record)
            except ValueError as exc:
                pending.dead.append((msg, f"invalid record: {exc}"))
                continue
            good_frames.append((msg, decoded))
        good_events: Events = []
        for msg, event in pending.events:
            try:
                self.validate_event(event)
            except ValueError as exc:
                pending.dead.append((msg, f"invalid event: {exc}"))
                continue
            good_events.append((msg, event))
        pending.frames, pending.events = good_frames, good_events

    # ---- decoding ----
    def _read(self, batch: Sequence[Inbound], pending: _Pending) -> None:
        """Route and decode ``batch``'s messages into ``pending``."""
        for msg in batch:
            raw = msg.header(TYPE_HEADER)
            kind = MessageType.of(raw)
            if kind is MessageType.FRAME:
                self._frame(msg, pending)
            elif kind is MessageType.EVENT:
                try:
                    pending.events.append((msg, decode_event(msg.value)))
                except ValueError as exc:
                    self._reject(msg, f"bad event: {exc}", pending)
            elif kind is MessageType.PROFILE:
                try:
                    pending.profiles.append((msg, ProfileResult.decode(msg.value)))
                except ValueError as exc:
                    self.counters["bad_profiles"] += 1
                    self._reject(msg, f"bad profile: {exc}", pending)
            elif kind is MessageType.KERNELS:
                self._kernels(msg, pending)
            else:
                self._reject(msg, f"unknown message type {(raw or b'')[:40]!r}", pending)

    def _kernels(self, msg: Inbound, pending: _Pending) -> None:
        try:
            window = KernelWindow.decode(msg.value)
        except ValueError as exc:
            self.counters["bad_kernels"] += 1
            self._reject(msg, f"bad kernels message: {exc}", pending)
            return
        if not window.node:  # the agent names its node; else the stream's header does
            window = window.with_identity(node=msg.header_text(NODE_HEADER) or "")
        pending.kernels.append((msg, window))

    def _handled_before(self, msg: Inbound) -> bool:
        return msg.offset < self.stored_below.get(msg.partition, -1)

    def _reject(self, msg: Inbound, reason: str, pending: _Pending) -> None:
        if self._handled_before(msg):
            pending.result.skipped += 1  # read again after a rewind: dead-lettered (or stored) the first time
            self.counters["reread_skipped"] += 1
        else:
            pending.dead.append((msg, reason))

    def _frame(self, msg: Inbound, pending: _Pending) -> None:
        if is_node_frame(msg.value):
            self._node_frame(msg, pending)
            return
        try:
            header = peek_header(msg.value)
        except FrameError as exc:
            self._reject(msg, f"undecodable frame: {exc}", pending)
            return
        if header.keyframe:
            self._keyframe(msg, header, pending)
        else:
            self._delta(msg, header, pending)

    def _decode(self, decode: Callable[[], _T], msg: Inbound, pending: _Pending) -> _T | None:
        """``decode()`` (a GPU frame's or a node frame's decoder on ``msg``), or None with ``msg`` set aside."""
        try:
            return decode()
        except FrameError as exc:
            self._reject(msg, f"undecodable frame: {exc}", pending)
        except Exception as exc:  # a decoder bug met by hostile input: set the frame aside, go on
            self.counters["decoder_errors"] += 1
            log.debug("decoder error at %d@%d", msg.partition, msg.offset, exc_info=True)
            self._reject(msg, f"undecodable frame (decoder error {type(exc).__name__}: {exc})", pending)
        return None

    def _keyframe(self, msg: Inbound, header: FrameHeader, pending: _Pending) -> None:
        fresh = FrameDecoder()
        records = self._decode(partial(fresh.decode_checked, msg.value, header), msg, pending)
        if records is None:
            return
        node = msg.header_text(NODE_HEADER) or records[-1].node
        sid = StreamId(msg.partition, node, msg.header_text(INSTANCE_HEADER), header.gpu)
        newest = max(r.ts for r in records)
        stream = self.streams.get(sid)
        if stream is not None and stream.expected_seq is not None and newest <= stream.last_ts:
            self.counters["stale_keyframes"] += 1  # a replay: stored (idempotently), the base stays
        else:
            stream = self.streams.install(sid, fresh, msg.offset, newest, self.clock())
        if stream is not None:
            pending.streams.append(stream)
        self._accept(msg, sid, records, pending, msg.offset)

    def _delta(self, msg: Inbound, header: FrameHeader, pending: _Pending) -> None:
        node = msg.header_text(NODE_HEADER)
        if node is not None:
            sid = StreamId(msg.partition, node, msg.header_text(INSTANCE_HEADER), header.gpu)
            found = self.streams.get(sid)
            candidates = [found] if found is not None and isinstance(found.decoder, FrameDecoder) else []
        else:  # an agent without identity headers: match by sequence number, then by time
            candidates = [s for s in self.streams.without_instance(msg.partition, header.gpu)
                          if isinstance(s.decoder, FrameDecoder)]
            sid = candidates[0].id if len(candidates) == 1 else StreamId(msg.partition, "", None, header.gpu)
        matching = [s for s in candidates if s.expected_seq == header.seq]
        if len(matching) > 1:
            # Agents without identity headers on two nodes, one UUID, in step: decoding
            # against the wrong base would store wrong values under the wrong node.
            self.counters["ambiguous_frames"] += 1
            nodes = ", ".join(sorted(s.id.node for s in matching))
            self._reject(msg, f"undecodable frame: ambiguous: the streams of {header.gpu} from nodes {nodes} "
                         f"(agents without node/instance headers) all expect frame {header.seq}", pending)
            return
        if matching:
            stream = matching[0]
            assert isinstance(stream.decoder, FrameDecoder)
            records = self._decode(partial(stream.decoder.decode_checked, msg.value, header), msg, pending)
            if records is None:
                return
            stream.last_ts = max(stream.last_ts, max(r.ts for r in records))
            self.streams.touch(stream, self.clock())
            pending.streams.append(stream)
            base = stream.keyframe_offset
            self._accept(msg, stream.id, records, pending, msg.offset if base is None else base)
            return
        for s in candidates:
            if s.expected_seq is not None and seq_behind(header.seq, s.expected_seq) \
                    and header.first_ts <= s.last_ts:
                pending.result.skipped += 1  # delivered twice (a producer retry, a re-read)
                self.counters["duplicate_frames"] += 1
                return
        if self._handled_before(msg):
            pending.result.skipped += 1  # a delta before its stream's keyframe, handled before a rewind
            return
        based = [s for s in candidates if s.expected_seq is not None]
        if based:
            reason = (f"sequence gap: expected frame {based[0].expected_seq}, got {header.seq}; this delta "
                      "frame's base is missing, waiting for a keyframe")
        else:
            reason = f"delta frame {header.seq} of {header.gpu} before any keyframe: waiting for a keyframe"
        pending.dead.append((msg, f"undecodable frame: {reason}"))
        self.counters["frames_without_base"] += 1
        self._ask_keyframe(sid, reason, header.first_ts, pending)

    # ---- node frames: every GPU of a node in one frame, one stream per node and agent instance ----
    def _node_frame(self, msg: Inbound, pending: _Pending) -> None:
        try:
            header = peek_node_header(msg.value)
        except FrameError as exc:
            self._reject(msg, f"undecodable frame: {exc}", pending)
            return
        node = msg.header_text(NODE_HEADER)
        if node is None:  # only agents that send the identity headers send node frames
            self._reject(msg, "undecodable frame: a node frame without the 'node' header names no stream", pending)
            return
        sid = StreamId(msg.partition, node, msg.header_text(INSTANCE_HEADER), NODE_STREAM)
        stream = self.streams.get(sid)
        if header.keyframe:
            fresh = NodeFrameDecoder()
            groups = self._decode(partial(fresh.decode_checked, msg.value, header), msg, pending)
            if groups is None:
                return
            newest = max(r.ts for g in groups for r in g)
            # the next frame in sequence is the new base whatever its times (a node frame may hold only a
            # GPU whose records are older than another GPU's in the frame before); else a replay is told
            # by its records being no newer than what the stream has decoded
            if stream is not None and stream.expected_seq not in (None, header.seq) and newest <= stream.last_ts:
                self.counters["stale_keyframes"] += 1  # a replay: stored (idempotently), the base stays
            else:
                stream = self.streams.install(sid, fresh, msg.offset, newest, self.clock())
            if stream is not None:
                pending.streams.append(stream)
            self._accept_node(msg, groups, pending, msg.offset)
            return
        if stream is not None and not isinstance(stream.decoder, NodeFrameDecoder):
            stream = None  # a GPU frame's stream under the same name (a GPU id of ""): not this one
        if stream is not None and stream.expected_seq == header.seq:
            decoder = stream.decoder
            assert isinstance(decoder, NodeFrameDecoder)
            groups = self._decode(partial(decoder.decode_checked, msg.value, header), msg, pending)
            if groups is None:
                return
            stream.last_ts = max(stream.last_ts, max(r.ts for g in groups for r in g))
            self.streams.touch(stream, self.clock())
            pending.streams.append(stream)
            base = stream.keyframe_offset
            self._accept_node(msg, groups, pending, msg.offset if base is None else base)
            return
        if stream is not None and stream.expected_seq is not None and seq_behind(header.seq, stream.expected_seq):
            pending.result.skipped += 1  # delivered twice (a producer retry, a re-read)
            self.counters["duplicate_frames"] += 1
            return
        if self._handled_before(msg):
            pending.result.skipped += 1
            return
        if stream is not None and stream.expected_seq is not None:
            reason = (f"sequence gap: expected frame {stream.expected_seq}, got {header.seq}; this delta "
                      "frame's base is missing, waiting for a keyframe")
        else:
            reason = f"delta node frame {header.seq} of {node} before any keyframe: waiting for a keyframe"
        pending.dead.append((msg, f"undecodable frame: {reason}"))
        self.counters["frames_without_base"] += 1
        self._ask_keyframe(sid, reason, math.nan, pending)

    def _accept_node(self, msg: Inbound, groups: list[list[GpuRecord]], pending: _Pending, base: int) -> None:
        """A node frame's records: one entry (the message is dead-lettered or stored whole), each GPU observed."""
        pending.frames.append((msg, [r for g in groups for r in g]))
        for records in groups:
            self._observe(msg, records[0].gpu, records, pending, base)

    def _ask_keyframe(self, sid: StreamId, reason: str, first_ts: float, pending: _Pending) -> None:
        if self.request_keyframe is None:
            return
        if not sid.node:
            self.counters["keyframe_requests_unaddressable"] += 1  # an older agent: it cannot answer anyway
            return
        now = self.clock()
        last = self._requested.get(sid)
        if last is not None and now - last < self.keyframe_request_interval_s:
            return
        if len(self._requested) > 4 * max(1, len(self.streams)) + 1024:
            self._requested = {k: t for k, t in self._requested.items()
                               if now - t < self.keyframe_request_interval_s}
        self._requested[sid] = now
        ts = first_ts if math.isfinite(first_ts) else 0.0
        gpu = None if sid.gpu == NODE_STREAM else sid.gpu  # a node stream: every GPU's next frame is one frame
        pending.requests.append(KeyframeRequest(sid.node, gpu, reason[:200], ts, sid.instance))

    def _accept(self, msg: Inbound, sid: StreamId, records: list[GpuRecord], pending: _Pending, base: int) -> None:
        """``base``: the offset of the keyframe ``msg`` was decoded from (its own, for a keyframe)."""
        pending.frames.append((msg, records))
        self._observe(msg, sid.gpu, records, pending, base)

    def _observe(self, msg: Inbound, gpu: str, records: list[GpuRecord], pending: _Pending, base: int) -> None:
        """Where ``gpu``'s records came from: the node's resume base, the partition's nodes, UUID conflicts."""
        node = records[-1].node
        seen = pending.bases.get(node)
        if seen is None or base < seen[1]:
            pending.bases[node] = (msg.partition, base)
        nodes = self.partition_nodes.get(msg.partition)
        if nodes is None:
            nodes = self.partition_nodes[msg.partition] = set()
        nodes.add(records[-1].node)
        first, last = records[0].ts, records[-1].ts
        other = self.conflicts.observe(gpu, records[-1].node, min(first, last), max(first, last))
        if other is not None:
            node = records[-1].node
            self.counters["gpu_uuid_conflicts"] += 1
            detail = (f"GPU UUID {gpu} is reported by node {other} and node {node} at once "
                      "(a re-imaged node or a misconfigured simulator?); both streams are stored with their node")
            _limited.warning(f"uuid:{gpu}", "%s", detail)
            event = EventRecord(first, node, gpu, UUID_CONFLICT_KIND, None, detail)
            pending.events.append((msg, event))

