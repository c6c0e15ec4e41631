"""From records to messages: per-GPU windows encoded as frames, events as JSON.

The sampling thread hands each record to :class:`Framer`; it appends to that GPU's
window and returns at once. A window becomes a frame when it holds ``window`` records
or when its oldest record is ``max_delay_s`` old, whichever comes first, so a busy GPU
gets compact multi-record frames and an idle one still reaches the collector within
``max_delay_s`` (freshness is a promise: p99 sample-to-row under 2 s). Frames carry
deltas against the previous frame and a keyframe every ``keyframe_every`` frames;
the collector resumes from the last keyframe after a restart.

``layout="node"`` (the default) flushes every GPU's window at once into one *node frame*
(:mod:`telemetry.codec.node`) when any of them is due: one frame, one Kafka record and
one column per metric for the whole node, where ``"gpu"`` sends a frame per GPU. At 1 Hz
that is 1-2 records per GPU frame, whose fixed costs made 3.2 bytes per value on the
Kafka log and most of the collector's decoding time (issue 16). ``"gpu"`` remains for
collectors older than node frames (upgrade the collectors first). ``deflate`` (the agent's
``frame_deflate``, on by default) compresses each node frame's body as the next part of one
deflate stream per keyframe interval: a frame of ~10 records is too small for a compressor of
its own, but against the frames before it its repeated structure and small residuals shrink by
about 30% (docs/codec.md, "Deflated node streams").

Messages are keyed by the node (:func:`telemetry.wire.partition_key`), so Kafka keeps each GPU's
frames in order and a pod's GPUs on one partition. Every frame and
event carries the Kafka headers ``node`` and ``instance`` (UTF-8; :mod:`telemetry.wire`): ``instance`` is a random
id the agent draws when its process starts, so the collector can tell two agents that
report the same GPU UUID apart (a re-imaged node, a misconfigured simulator) and knows a
restarted agent's stream starts afresh.

:meth:`Framer.request_keyframe` makes a GPU's next frame (or every GPU's) a keyframe: the
sender asks after a reconnect, a replay or dropped frames, and the collector asks over
the control topic when it lost a stream's base (:mod:`agent.control`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agent.cpuclock import TRANSPORT, ThreadCpu
from agent.stats import counter, snapshot
from telemetry.codec import FrameEncoder
from telemetry.codec.node import NodeFrameEncoder
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import Message, MessageType, encode_event, partition_key, stream_headers

Submit = Callable[[Message], None]


@snapshot
class FramerStats:
    frames_total: int = counter("gpuwatch_agent_frames", "Telemetry frames encoded.")
    records_total: int = counter("gpuwatch_agent_frame_records", "GPU samples encoded into frames.")
    frame_bytes_total: int = counter("gpuwatch_agent_frame_bytes", "Bytes of telemetry frames encoded.")
    events_total: int = counter("gpuwatch_agent_event_messages", "Event messages sent (XID, throttling...).")
    keyframe_requests_total: int = counter(
        "gpuwatch_agent_keyframe_requests", "Requests that made a GPU's next frame a keyframe (sender, collector).")


class Framer:
    def __init__(
        self,
        submit: Submit,
        *,
        node: str,
        instance: str,
        window: int = 10,
        max_delay_s: float = 1.0,
        keyframe_every: int = 60,
        zstd_level: int | None = None,
        clock: Callable[[], float] = time.time,
        cpu: ThreadCpu | None = None,
        layout: str = "node",
        deflate: bool = False,
    ) -> None:
        if layout not in ("node", "gpu"):
            raise ValueError(f"frame layout must be 'node' or 'gpu', got {layout!r}")
        self.submit = submit
        self.layout = layout
        self.deflate = deflate  # node frames only: each body deflated against the frames before it
        self.node = node
        self.instance = instance
        self.window = window
        self.max_delay_s = max_delay_s
        self.keyframe_every = keyframe_every
        self.zstd_level = zstd_level
        self.clock = clock
        self.cpu = cpu or ThreadCpu()
        self.key = partition_key(node)
        self.frame_headers = stream_headers(MessageType.FRAME, node, instance)
        self.event_headers = stream_headers(MessageType.EVENT, node, instance)
        self._lock = threading.Lock()
        self._pending: dict[str, list[GpuRecord]] = {}
        self._encoders: dict[str, FrameEncoder] = {}
        self._node_encoder: NodeFrameEncoder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_total = 0
        self.records_total = 0
        self.frame_bytes_total = 0
        self.events_total = 0
        self.keyframe_requests_total = 0

    # ---- sinks (called from the sampling and XID threads) ----
    def add(self, record: GpuRecord) -> None:
        with self._lock:
            pending = self._pending.setdefault(record.gpu, [])
            pending.append(record)
            if len(pending) >= self.window:
                if self.layout == "node":
                    self._emit_node()
                else:
                    self._emit(record.gpu)

    def add_event(self, event: EventRecord) -> None:
        self.events_total += 1
        self.submit(Message(self.key, encode_event(event), self.event_headers))

    # ---- flushing ----
    def flush_due(self, now: float | None = None) -> int:
        """Emit every window whose oldest record is at least ``max_delay_s`` old."""
        now = self.clock() if now is None else now
        emitted = 0
        with self._lock:
            for gpu, pending in self._pending.items():
                if pending and now - pending[0].ts >= self.max_delay_s:
                    if self.layout == "node":
                        return self._emit_node()
                    self._emit(gpu)
                    emitted += 1
        return emitted

    def flush(self) -> None:
        with self._lock:
            if self.layout == "node":
                self._emit_node()
                return
            for gpu, pending in self._pending.items():
                if pending:
                    self._emit(gpu)

    def request_keyframe(self, gpu: str | None) -> None:
        """Make ``gpu``'s next frame a keyframe, or every GPU's when ``gpu`` is None. Any thread.

        A GPU without an encoder yet starts with a keyframe anyway; an unknown GPU is ignored.
        """
        with self._lock:
            self.keyframe_requests_total += 1
            if self._node_encoder is not None:
                self._node_encoder.force_keyframe()  # one frame carries every GPU: its next is a keyframe
            if gpu is None:
                for encoder in self._encoders.values():
                    encoder.force_keyframe()
            elif (one := self._encoders.get(gpu)) is not None:
                one.force_keyframe()

    def stats(self) -> FramerStats:
        return FramerStats(frames_total=self.frames_total, records_total=self.records_total,
                           frame_bytes_total=self.frame_bytes_total, events_total=self.events_total,
                           keyframe_requests_total=self.keyframe_requests_total)

    def _emit(self, gpu: str) -> None:
        records = self._pending[gpu]
        self._pending[gpu] = []
        encoder = self._encoders.get(gpu)
        if encoder is None:
            encoder = self._encoders[gpu] = FrameEncoder(
                keyframe_every=self.keyframe_every, zstd_level=self.zstd_level)
        frame = encoder.encode(records)
        self.frames_total += 1
        self.records_total += len(records)
        self.frame_bytes_total += len(frame)
        self.submit(Message(self.key, frame, self.frame_headers))

    def _emit_node(self) -> int:
        """Every GPU's pending records as one node frame; 1 when one was sent."""
        windows = [p for p in self._pending.values() if p]
        if not windows:
            return 0
        self._pending = {}
        encoder = self._node_encoder
        if encoder is None:
            encoder = self._node_encoder = NodeFrameEncoder(
                keyframe_every=self.keyframe_every, zstd_level=None if self.deflate else self.zstd_level,
                deflate=self.deflate)
        frame = encoder.encode(windows)
        self.frames_total += 1
        self.records_total += sum(map(len, windows))
        self.frame_bytes_total += len(frame)
        self.submit(Message(self.key, frame, self.frame_headers))
        return 1

    # ---- a timer thread for max_delay ----
    def start(self) -> None:
        self._thread = self.cpu.spawn(TRANSPORT, self._run, "gpuwatch-framer")
        self._thread.start()

    def _run(self) -> None:
        tick = max(0.05, self.max_delay_s / 4)
        while not self._stop.wait(tick):
            self.flush_due()

    def stop(self, timeout: float = 5.0) -> None:
        """Emit what is pending (shutdown loses nothing) and end the timer thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.flush()
