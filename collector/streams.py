"""Which frames decode against which base: one decoder per agent stream, and UUID conflicts.

Frames are deltas against the previous frame of the same *stream*: one agent process's
frames of one GPU. A GPU UUID alone does not name a stream: an agent restarts (a new
stream of the same GPU), a re-imaged node or a misconfigured simulator reports a UUID that
another node reports too. So a stream is identified by (partition, node, agent instance,
GPU). Agents send the Kafka headers ``node`` and ``instance`` with every message; a
message without them comes from an older agent, whose stream is known by the node its
records carry once a keyframe has been decoded (its deltas are matched to a stream by
sequence number and time).

Why a base is replaced only by a *newer* keyframe: a re-read after a rewind, or an agent's
spool replaying old frames, delivers keyframes older than what the stream has decoded;
taking one as the base would make every later delta a "sequence gap". A keyframe whose
newest record is not newer than the stream's newest is decoded on its own (keyframes are
self-contained) and stored, and the stream keeps its base.

:class:`UuidConflicts` notices one UUID reported by two nodes at once (their record times
overlap within :data:`CONFLICT_WINDOW_S`), so the collector can report it once per pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from telemetry.codec import FrameDecoder
from telemetry.codec.node import NodeFrameDecoder

#: The ``gpu`` of a node stream's id: one agent's node frames, every GPU of its node in each.
NODE_STREAM: Final = ""
SEQ_MASK: Final = 0xFFFFFFFF  # frame sequence numbers are u32 and wrap
_SEQ_HALF: Final = 1 << 31

#: Two nodes' records of one UUID closer than this (seconds of record time) are "at once".
CONFLICT_WINDOW_S: Final = 60.0
#: A conflict between the same two nodes is reported again after this long (record time).
CONFLICT_REPEAT_S: Final = 3600.0


def seq_behind(seq: int, expected: int) -> bool:
    """Whether ``seq`` comes before ``expected`` in u32 serial-number order."""
    return 0 < ((expected - seq) & SEQ_MASK) < _SEQ_HALF


@dataclass(frozen=True, slots=True)
class StreamId:
    """One agent's frames of one GPU, or of its whole node (``gpu`` is :data:`NODE_STREAM`).
    ``instance`` None: the agent sent no instance header."""

    partition: int
    node: str
    instance: str | None
    gpu: str

    def describe(self) -> str:
        who = self.node if self.instance is None else f"{self.node}/{self.instance}"
        return f"the node frames from {who}" if self.gpu == NODE_STREAM else f"{self.gpu} from {who}"


@dataclass(slots=True)
class Stream:
    id: StreamId
    decoder: FrameDecoder | NodeFrameDecoder
    keyframe_offset: int | None = None  # offset of the keyframe the current base started at
    last_ts: float = -math.inf  # newest record time decoded
    last_used: float = 0.0  # clock() of the last frame decoded (for expiry)
    mark: int = 0  # the partition's count of decoded frames at this stream's last frame

    @property
    def expected_seq(self) -> int | None:
        return self.decoder.expected_seq


@dataclass(slots=True)
class StreamTable:
    """The streams of the partitions this collector reads."""

    _by_id: dict[StreamId, Stream] = field(default_factory=dict)
    _decoded: dict[int, int] = field(default_factory=dict)  # frames decoded per partition
    # the streams without an instance, by (partition, GPU): an older agent's delta frame is matched
    # against these, and a scan of every stream for each such frame cost as much as decoding it
    # (about 100 µs a frame with 2,000 streams)
    _headerless: dict[tuple[int, str], list[Stream]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Stream]:
        return iter(self._by_id.values())

    def get(self, sid: StreamId) -> Stream | None:
        return self._by_id.get(sid)

    def install(self, sid: StreamId, decoder: FrameDecoder | NodeFrameDecoder, offset: int, newest_ts: float,
                now: float) -> Stream:
        """Make ``decoder`` (which just decoded a keyframe at ``offset``) the base of ``sid``."""
        stream = self._by_id.get(sid)
        if stream is None:
            stream = self._by_id[sid] = Stream(sid, decoder)
            if sid.instance is None:
                self._headerless.setdefault((sid.partition, sid.gpu), []).append(stream)
        stream.decoder = decoder
        stream.keyframe_offset = offset
        stream.last_ts = newest_ts
        self.touch(stream, now)
        return stream

    def touch(self, stream: Stream, now: float) -> None:
        """``stream`` decoded a frame (or its frames were stored) at ``now``."""
        count = self._decoded.get(stream.id.partition, 0) + 1
        self._decoded[stream.id.partition] = count
        stream.last_used = now
        stream.mark = count

    def without_instance(self, partition: int, gpu: str) -> list[Stream]:
        """Streams of ``gpu`` in ``partition`` known without an instance (older agents' deltas match these)."""
        return list(self._headerless.get((partition, gpu), ()))

    def _forget(self, sid: StreamId) -> None:
        stream = self._by_id.pop(sid)
        if sid.instance is None:
            key = (sid.partition, sid.gpu)
            rest = [s for s in self._headerless.get(key, ()) if s is not stream]
            if rest:
                self._headerless[key] = rest
            else:
                self._headerless.pop(key, None)

    def partitions(self) -> set[int]:
        return {sid.partition for sid in self._by_id}

    def drop_partition(self, partition: int) -> int:
        gone = [sid for sid in self._by_id if sid.partition == partition]
        for sid in gone:
            self._forget(sid)
        self._decoded.pop(partition, None)
        return len(gone)

    def expire(self, now: float, idle_s: float, idle_frames: int = 10_000) -> int:
        """Forget streams of agents that are gone, so that they do not pin the resume offset.

        Gone means: nothing decoded for ``idle_s`` *while* their partition decoded
        ``idle_frames`` frames of other streams. Time alone is not enough: while the broker
        or the database is away nothing is decoded, and every stream would look gone.
        """
        gone = [sid for sid, s in self._by_id.items()
                if now - s.last_used > idle_s and self._decoded.get(sid.partition, 0) - s.mark > idle_frames]
        for sid in gone:
            self._forget(sid)
        return len(gone)

    def resume_offsets(self) -> dict[int, int]:
        """Per partition, the oldest offset from which every stream's base can be rebuilt."""
        out: dict[int, int] = {}
        for sid, stream in self._by_id.items():
            if stream.keyframe_offset is None:
                continue
            cur = out.get(sid.partition)
            out[sid.partition] = stream.keyframe_offset if cur is None else min(cur, stream.keyframe_offset)
        return out


@dataclass(slots=True)
class UuidConflicts:
    """One GPU UUID reported by two nodes at once, noticed from record times."""

    window_s: float = CONFLICT_WINDOW_S
    repeat_s: float = CONFLICT_REPEAT_S
    _last: dict[str, dict[str, float]] = field(default_factory=dict)  # gpu -> node -> newest record ts
    _reported: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (gpu, node, node) -> ts

    def observe(self, gpu: str, node: str, first_ts: float, last_ts: float) -> str | None:
        """Record that ``node`` reported ``gpu`` from ``first_ts`` to ``last_ts``; return the
        other node if another node reported it within the window and this pair was not
        reported in the last ``repeat_s``."""
        nodes = self._last.setdefault(gpu, {})
        found: str | None = None
        for other, other_ts in nodes.items():
            if other == node or first_ts > other_ts + self.window_s:
                continue
            low, high = sorted((node, other))
            before = self._reported.get((gpu, low, high))
            if before is None or abs(first_ts - before) >= self.repeat_s:
                self._reported[(gpu, low, high)] = first_ts
                found = other
                break
        if last_ts > nodes.get(node, -math.inf):
            nodes[node] = last_ts
        return found
