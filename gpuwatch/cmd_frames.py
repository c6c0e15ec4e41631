"""``gpuwatch frames encode|decode``: convert between JSON Lines records and frame files (.gwf).

A trace recorded on a real GPU node travels as a small ``.gwf`` file and is replayed
anywhere through the same decoder the collector runs. Bad input never stops a
conversion: a bad JSON line is reported as ``file:line: reason`` and skipped, a damaged
stretch of a frame file or a frame that does not decode is reported with its byte offset
and skipped; the exit status is 1 when anything was skipped, 0 otherwise.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator
from typing import Any

import zstandard

from telemetry.codec import FrameDecoder, FrameEncoder, FrameError, StreamDecoder, WindowedEncoder
from telemetry.codec.header import MAX_RECORDS
from telemetry.framefile import Damage, FrameFileError, FrameFileWriter, read_frames
from telemetry.records import BadLine, GpuRecord, iter_jsonl, write_jsonl


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "frames", help="encode/decode frame files (.gwf)", description=__doc__.splitlines()[0] if __doc__ else None
    )
    actions = p.add_subparsers(dest="frames_command", required=True, metavar="ACTION")
    enc = actions.add_parser("encode", help="JSON Lines (.jsonl or .jsonl.zst) to a frame file")
    enc.add_argument("input", help="JSON Lines records; a .zst suffix means zstd-compressed")
    enc.add_argument("output", help="the .gwf file to write")
    enc.add_argument("--lossless", action="store_true", help="keep every float bit for bit (default: quantise)")
    enc.add_argument("--zstd", type=_int_range(1, 22), metavar="LEVEL", help="zstd-compress each frame body")
    enc.add_argument("--window", type=_int_range(1, MAX_RECORDS), default=60, help="records per frame (default 60)")
    enc.add_argument(
        "--keyframe-every", type=_int_range(1, 1 << 20), default=10, help="a keyframe every K frames (default 10)"
    )
    enc.set_defaults(func=_encode)
    dec = actions.add_parser("decode", help="a frame file to JSON Lines")
    dec.add_argument("input", help="the .gwf file to read")
    dec.add_argument("output", help="the JSON Lines file to write")
    dec.set_defaults(func=_decode)


def _int_range(lo: int, hi: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is not in {lo}..{hi}")
        return value

    return parse


def read_records(path: str) -> Iterator[GpuRecord | BadLine]:
    """Records of a JSON Lines file, zstd-compressed when the name ends in ``.zst``.

    Raises OSError when the file cannot be opened and zstandard.ZstdError when a
    compressed stream turns out corrupt.
    """
    with open(path, "rb") as raw:
        stream: Any = zstandard.ZstdDecompressor().stream_reader(raw) if path.endswith(".zst") else raw
        with io.TextIOWrapper(stream, encoding="utf-8", errors="replace") as text:
            yield from iter_jsonl(text, path)


def _encode(args: argparse.Namespace) -> int:
    quantize = not args.lossless

    def make() -> FrameEncoder:
        return FrameEncoder(quantize=quantize, keyframe_every=args.keyframe_every, zstd_level=args.zstd)

    windows = WindowedEncoder(args.window, make)
    records = values = bad = 0
    try:
        with open(args.output, "wb") as out:
            writer = FrameFileWriter(out)
            for item in read_records(args.input):
                if isinstance(item, BadLine):
                    print(item, file=sys.stderr)
                    bad += 1
                    continue
                records += 1
                values += len(item.metrics)
                for frame in windows.add(item):
                    writer.write(frame)
            for frame in windows.flush():
                writer.write(frame)
    except OSError as exc:
        print(f"gpuwatch frames encode: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except zstandard.ZstdError as exc:
        print(f"{args.input}: corrupt zstd stream after {records + bad} lines: {exc}", file=sys.stderr)
        return 1
    per_value = f"{(writer.bytes / values):.3f}" if values else "-"
    mode = "quantised" if quantize else "lossless"
    print(
        f"{args.input}: {records} records, {values} metric values -> {writer.frames} frames, "
        f"{writer.bytes} bytes ({per_value} bytes/value, {mode}) in {args.output}; {bad} bad lines skipped",
        file=sys.stderr,
    )
    return 1 if bad else 0


def _decode(args: argparse.Namespace) -> int:
    streams = StreamDecoder(FrameDecoder)
    frames = records = skipped = 0
    try:
        with open(args.input, "rb") as fh, open(args.output, "w", encoding="utf-8") as out:
            for item in read_frames(fh):
                if isinstance(item, Damage):
                    print(f"{args.input}: {item}", file=sys.stderr)
                    skipped += 1
                    continue
                try:
                    decoded = streams.decode(item.frame)
                except FrameError as exc:
                    print(f"{args.input}: frame at byte {item.offset}: {exc}", file=sys.stderr)
                    skipped += 1
                    continue
                frames += 1
                records += write_jsonl(decoded, out)
    except OSError as exc:
        print(f"gpuwatch frames decode: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except FrameFileError as exc:
        print(f"{args.input}: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.input}: {frames} frames -> {records} records in {args.output}; "
        f"{skipped} damaged stretches or frames skipped",
        file=sys.stderr,
    )
    return 1 if skipped else 0
