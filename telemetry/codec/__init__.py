"""The frame codec: windows of one GPU's records as compact, self-describing, checked frames.

Agents encode, Kafka carries, collectors decode; ``.gwf`` files (telemetry.framefile) hold
the same frames for replay. The wire format is specified in docs/codec.md. Public names:

- :class:`FrameEncoder` / :class:`FrameDecoder`: one per GPU stream, stateful.
- :func:`peek_header` / :class:`FrameHeader`: route a frame without decoding it.
- :class:`FrameError`: the one exception the decoder raises.
- :class:`WindowedEncoder` / :class:`StreamDecoder`: the per-GPU bookkeeping for many GPUs.
"""

from telemetry.codec.errors import FrameError
from telemetry.codec.frame import FrameDecoder, FrameEncoder
from telemetry.codec.header import FrameHeader, peek_header
from telemetry.codec.streams import StreamDecoder, WindowedEncoder

__all__ = [
    "FrameDecoder",
    "FrameEncoder",
    "FrameError",
    "FrameHeader",
    "StreamDecoder",
    "WindowedEncoder",
    "peek_header",
]
