"""``gpuwatch catalog``: print the metric catalog (the source of docs/metrics.md)."""

from __future__ import annotations

import argparse
from typing import Any

from telemetry.catalog import CATALOG, metrics_markdown


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("catalog", help="print the metric catalog")
    p.add_argument("--markdown", action="store_true", help="as the Markdown table of docs/metrics.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(metrics_markdown(), end="")
    else:
        for m in CATALOG:
            print(f"{m.key}\t{m.unit}\t{m.kind}\t{m.source}\t{m.cost}")
    return 0
