"""The codec's fast column readers against its exact decoder: the same records, the same errors.

``telemetry.codec.columns.read_column`` reads a typed block with ``_read_typed`` /
``_read_xor`` when it can and otherwise hands it to ``decode_column``, the step-by-step
decoder with the exact error messages. Here every stream is decoded twice, once as shipped
and once with the fast readers refusing every block (so ``decode_column`` reads them all),
and the two must agree record for record, bit for bit, and error for error: on any window
stream hypothesis builds, lossless and quantised, and on the same frames corrupted (CRC
fixed, so the corruption reaches the column parsers) in the middle of a stream, where the
decoder's column state after the bad frame matters too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.codec import FrameDecoder, FrameEncoder, FrameError, columns
from telemetry.records import GpuRecord
from tests.support.standin import standin_trace
from tests.test_codec_fuzz import mutate, with_crc
from tests.test_codec_roundtrip import exact_record, streams

DIFF = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextlib.contextmanager
def counting(exact_only: bool) -> Iterator[dict[str, int]]:
    """Count the fast readers' hits and ``decode_column``'s calls; with ``exact_only`` the fast readers refuse."""
    counts = {"fast": 0, "exact": 0}

    def fast(reader: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any) -> Any:
            if exact_only:
                return None
            got = reader(*args)
            counts["fast"] += got is not None
            return got
        return read

    def exact(*args: Any) -> Any:
        counts["exact"] += 1
        return decode_column(*args)

    decode_column = columns.decode_column
    with mock.patch.object(columns, "_read_typed", fast(columns._read_typed)), \
            mock.patch.object(columns, "_read_xor", fast(columns._read_xor)), \
            mock.patch.object(columns, "decode_column", exact):
        yield counts


def outcomes(frames: Sequence[bytes]) -> list[object]:
    """What one decoder makes of each frame in turn: its records (bit-exact) or its error message."""
    decoder = FrameDecoder()
    out: list[object] = []
    for frame in frames:
        try:
            out.append([exact_record(r) for r in decoder.decode(frame)])
        except FrameError as exc:
            out.append(("FrameError", str(exc)))
    return out


def both_ways(frames: Sequence[bytes]) -> tuple[list[object], list[object]]:
    with counting(exact_only=False):
        fast = outcomes(frames)
    with counting(exact_only=True) as counts:
        exact = outcomes(frames)
    assert counts["fast"] == 0
    return fast, exact


def encode(windows: Sequence[Sequence[GpuRecord]], quantize: bool, keyframe_every: int) -> list[bytes]:
    encoder = FrameEncoder(quantize=quantize, keyframe_every=keyframe_every)
    return [encoder.encode(list(w)) for w in windows]


@DIFF
@given(streams(max_windows=5), st.booleans(), st.integers(min_value=1, max_value=3))
def test_fast_readers_decode_every_stream_as_the_exact_decoder(
    windows: list[list[GpuRecord]], quantize: bool, keyframe_every: int
) -> None:
    fast, exact = both_ways(encode(windows, quantize, keyframe_every))
    assert fast == exact


@DIFF
@given(streams(max_windows=4), st.booleans(), st.data())
def test_fast_readers_fail_and_resync_as_the_exact_decoder(
    windows: list[list[GpuRecord]], quantize: bool, data: st.DataObject
) -> None:
    frames = encode(windows, quantize, keyframe_every=2)
    index = data.draw(st.integers(min_value=0, max_value=len(frames) - 1))
    corrupted = mutate(data, frames[index])
    corrupted = with_crc(corrupted) if len(corrupted) >= 4 else corrupted
    fast, exact = both_ways([*frames[:index], corrupted, *frames[index + 1 :]])
    assert fast == exact


def test_the_fast_readers_take_the_common_blocks() -> None:
    """Else the tests above would compare the exact decoder with itself."""
    records = list(standin_trace(1, 120, seed=5))
    frames = {quantize: encode([records[i : i + 10] for i in range(0, len(records), 10)], quantize, 4)
              for quantize in (False, True)}
    for quantize, stream in frames.items():
        with counting(exact_only=False) as counts:
            shipped = outcomes(stream)
        assert counts["fast"] > 10 * counts["exact"], (quantize, counts)
        with counting(exact_only=True) as counts:
            assert outcomes(stream) == shipped
        assert counts["exact"] > 0 and counts["fast"] == 0
