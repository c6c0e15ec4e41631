"""From records to messages: per-GPU windows encoded as frames, events as JSON.

The sampling thread hands each record to :class:`Framer`; it appends to that GPU's
window and returns at once. A window becomes a frame when it holds ``window`` records
or when its oldest record is ``max_delay_s`` old, whichever comes first, so a busy GPU
gets compact multi-record frames and an idle one still reaches the collector within
``max_delay_s`` (freshness is a promise: p99 sample-to-row under 2 s). Frames carry
deltas against the GPU's previous frame and a keyframe every ``keyframe_every`` frames;
the collector resumes from the last keyframe after a restart.

Messages are keyed by GPU UUID, so Kafka keeps each GPU's frames in order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from agent.spool import Message
from telemetry.codec import FrameEncoder
from telemetry.records import EventRecord, GpuRecord

FRAME_HEADERS = (("type", b"frame"),)
EVENT_HEADERS = (("type", b"event"),)

Submit = Callable[[Message], None]


class Framer:
    def __init__(
        self,
        submit: Submit,
        *,
        window: int = 10,
        max_delay_s: float = 1.0,
        keyframe_every: int = 60,
        zstd_level: int | None = None,
        clock: Callable[[], float] = time.time,
        node: str = "",
        instance: str = "",
    ) -> None:
        self.submit = submit
        # identity headers (UTF-8): the collector keeps one decoder per (node, instance, GPU)
        ident = tuple((name, value.encode()) for name, value in (("node", node), ("instance", instance)) if value)
        self.frame_headers = FRAME_HEADERS + ident
        self.event_headers = EVENT_HEADERS + ident
        self.window = window
        self.max_delay_s = max_delay_s
        self.keyframe_every = keyframe_every
        self.zstd_level = zstd_level
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, list[GpuRecord]] = {}
        self._encoders: dict[str, FrameEncoder] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_total = 0
        self.records_total = 0
        self.frame_bytes_total = 0

    # ---- sinks (called from the sampling and XID threads) ----
    def add(self, record: GpuRecord) -> None:
        with self._lock:
            pending = self._pending.setdefault(record.gpu, [])
            pending.append(record)
            if len(pending) >= self.window:
                self._emit(record.gpu)

    def add_event(self, event: EventRecord) -> None:
        self.submit(Message(event.gpu.encode(), json.dumps(event.to_dict()).encode(), self.event_headers))

    # ---- flushing ----
    def flush_due(self, now: float | None = None) -> int:
        """Emit every window whose oldest record is at least ``max_delay_s`` old."""
        now = self.clock() if now is None else now
        emitted = 0
        with self._lock:
            for gpu, pending in self._pending.items():
                if pending and now - pending[0].ts >= self.max_delay_s:
                    self._emit(gpu)
                    emitted += 1
        return emitted

    def flush(self) -> None:
        with self._lock:
            for gpu, pending in self._pending.items():
                if pending:
                    self._emit(gpu)

    def resync(self) -> None:
        """Make every GPU's next frame a keyframe (after the spool dropped frames, say)."""
        with self._lock:
            for encoder in self._encoders.values():
                encoder.force_keyframe()

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
        self.submit(Message(gpu.encode(), frame, self.frame_headers))

    # ---- a timer thread for max_delay ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuwatch-framer", daemon=True)
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
