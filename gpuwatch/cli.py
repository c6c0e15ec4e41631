"""The ``gpuwatch`` command and its subcommands.

Each subcommand lives in its own ``cmd_*.py`` module exposing ``register(subparsers)``;
this module only collects them, so adding a command touches one line here. Imports of
heavy dependencies (NVML, Kafka, the database) happen inside the command functions, so
``gpuwatch --help`` works with only the base install.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuwatch import (
    cmd_agent,
    cmd_catalog,
    cmd_collector,
    cmd_export,
    cmd_frames,
    cmd_replay,
    cmd_token,
    cmd_top,
    cmd_up,
)

_COMMANDS = (cmd_up, cmd_agent, cmd_collector, cmd_export, cmd_frames, cmd_replay, cmd_catalog, cmd_token, cmd_top)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuwatch", description=__doc__.splitlines()[0] if __doc__ else None)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
