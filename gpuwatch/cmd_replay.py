"""``gpuwatch replay FILE.jsonl [-o anomalies.json]``: the collector's detectors over a trace.

Why a command: an incident seen in production can be exported and replayed offline, and
the detectors give the same answers as they did live, because they take time from the
records. Output is TELEMETRY.md's anomaly array; each bad input line is reported on
stderr with its file and line number, counted, and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "replay", help="run the anomaly detectors over a JSON Lines trace and write the anomalies")
    p.add_argument("file", help="trace in the JSON Lines format of TELEMETRY.md ('-' for stdin)")
    p.add_argument("-o", "--output", default="-", help="anomalies as a JSON array (default: stdout)")
    p.add_argument("--idle-after", type=float, default=600.0, metavar="S",
                   help="idle allocated GPU: SM activity near zero for this long (default 600 s)")
    p.add_argument("--max-bad-lines-shown", type=int, default=20, metavar="N",
                   help="report at most N bad lines individually (all are counted)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from collector.detect.finding import DetectorConfig
    from collector.detect.replay import iter_trace, read_trace, replay
    from telemetry.records import BadLine

    if args.idle_after <= 0:
        print("gpuwatch replay: --idle-after must be positive", file=sys.stderr)
        return 2
    shown = 0

    def on_bad(bad: BadLine) -> None:
        nonlocal shown
        if shown < args.max_bad_lines_shown:
            print(f"gpuwatch replay: skipped {bad}", file=sys.stderr)
        shown += 1

    began = time.perf_counter()
    try:
        items = iter_trace(sys.stdin, "<stdin>") if args.file == "-" else read_trace(args.file)
        result = replay(items, DetectorConfig(idle_after_s=args.idle_after), on_bad)
    except OSError as exc:
        print(f"gpuwatch replay: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - began
    text = json.dumps([a.to_dict() for a in result.anomalies], indent=1)
    if args.output == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(f"gpuwatch replay: {result.records} records, {result.bad_lines} bad lines skipped, "
          f"{len(result.anomalies)} anomalies in {elapsed:.2f} s", file=sys.stderr)
    return 0
