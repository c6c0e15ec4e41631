"""``gpuwatch export``: write what the agent samples as JSON Lines (the replay format)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import IO, Any

from gpuwatch.agent_stack import build_agent
from gpuwatch.cmd_agent import add_agent_flags, settings_from


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="sample GPUs and write records (JSON Lines, or frames with --format gwf)")
    add_agent_flags(p)
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGTERM)")
    p.add_argument("--format", choices=["jsonl"], default="jsonl", help="output format")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    from agent.settings import SettingsError
    from telemetry.records import GpuRecord

    try:
        settings = settings_from(args)
    except SettingsError as exc:
        print(f"gpuwatch export: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, stream=sys.stderr)
    out: IO[str] = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    lock = threading.Lock()
    count = 0

    def write(record: GpuRecord) -> None:
        nonlocal count
        with lock:
            out.write(record.to_json() + "\n")
            count += 1

    agent = build_agent(settings, record_sinks=(write,))
    agent.start()
    try:
        if args.duration is not None:
            time.sleep(args.duration)
        else:
            from gpuwatch.cmd_agent import wait_for_signal

            wait_for_signal()
    finally:
        agent.stop()
        with lock:
            out.flush()
            if out is not sys.stdout:
                out.close()
    print(f"gpuwatch export: {count} records", file=sys.stderr)
    return 0
