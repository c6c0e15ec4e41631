"""Many GPUs over one channel: windows per GPU on the way out, one decoder per GPU on the way in.

A frame holds one GPU's window and each side keeps state per GPU stream. These two
helpers do the bookkeeping that the agent's sender, the collector's consumer and the
``.gwf`` file tools share: :class:`WindowedEncoder` buffers records per GPU and emits a
frame whenever a GPU's window is full; :class:`StreamDecoder` routes each frame by its
header's GPU (read by :func:`peek_header` without decoding the body) to that GPU's
:class:`FrameDecoder`.
"""

from __future__ import annotations

from collections.abc import Callable

from telemetry.codec.frame import FrameDecoder, FrameEncoder
from telemetry.codec.header import peek_header
from telemetry.records import GpuRecord


class WindowedEncoder:
    """Buffers records per GPU; ``add`` returns the frames of windows that became full."""

    def __init__(self, window: int, make_encoder: Callable[[], FrameEncoder] = FrameEncoder) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 record, got {window}")
        self.window = window
        self._make = make_encoder
        self._encoders: dict[str, FrameEncoder] = {}
        self._pending: dict[str, list[GpuRecord]] = {}

    @property
    def encoders(self) -> dict[str, FrameEncoder]:
        return self._encoders

    def add(self, record: GpuRecord) -> list[bytes]:
        gpu = record.gpu
        pending = self._pending.get(gpu)
        if pending is None:
            pending = self._pending[gpu] = []
        pending.append(record)
        if len(pending) < self.window:
            return []
        return [self._emit(gpu)]

    def flush(self) -> list[bytes]:
        """Frames of every partly filled window, oldest GPU first."""
        return [self._emit(gpu) for gpu in list(self._pending) if self._pending[gpu]]

    def _emit(self, gpu: str) -> bytes:
        records = self._pending[gpu]
        self._pending[gpu] = []
        encoder = self._encoders.get(gpu)
        if encoder is None:
            encoder = self._encoders[gpu] = self._make()
        return encoder.encode(records)


class StreamDecoder:
    """One :class:`FrameDecoder` per GPU; a GPU's decoder is made at its first keyframe.

    ``decode`` raises FrameError like a FrameDecoder, including for a delta frame of a
    GPU whose keyframe has not been seen (the decoder made for it waits for one).
    """

    def __init__(self, make_decoder: Callable[[], FrameDecoder] = FrameDecoder) -> None:
        self._make = make_decoder
        self._decoders: dict[str, FrameDecoder] = {}

    @property
    def decoders(self) -> dict[str, FrameDecoder]:
        return self._decoders

    def decode(self, frame: bytes) -> list[GpuRecord]:
        header = peek_header(frame)
        decoder = self._decoders.get(header.gpu)
        if decoder is None:
            decoder = self._make()
            if header.keyframe:
                self._decoders[header.gpu] = decoder
        return decoder.decode_checked(frame, header)
