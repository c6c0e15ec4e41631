"""The one error type a frame decoder raises.

A collector consumes frames from many agents of many versions; whatever arrives, it must be
able to catch exactly one exception type, log what was wrong and where, and carry on with
the next frame. Every check in the decoder therefore ends in :class:`FrameError`, whose
message names the problem and the byte offset (in the frame, or in the decompressed body
when the body was zstd-compressed).
"""

from __future__ import annotations


class FrameError(ValueError):
    """A frame that cannot be decoded: corrupt, truncated, out of sequence or from an unknown version."""

    def __init__(self, reason: str, offset: int | None = None, where: str = "frame") -> None:
        self.reason = reason
        self.offset = offset
        self.where = where
        text = reason if offset is None else f"{reason} (at {where} byte {offset})"
        super().__init__(text)
