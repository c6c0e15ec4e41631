"""``gpuwatch catalog``: print the metric catalog, and write what is generated from it.

Why one command for both: docs/metrics.md (``--markdown``) and the migrations' metric
columns (``--sql``) are generated from the same table, so adding a catalog row and
running ``gpuwatch catalog --sql`` is the whole of the schema work (the SQL generator
itself is :mod:`collector.store.sqlgen`: SQL belongs to the store). ``--sql --check``
writes nothing and exits 1 when a generated file is out of date, for CI.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from telemetry.catalog import CATALOG, metrics_markdown


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("catalog", help="print the metric catalog")
    p.add_argument("--markdown", action="store_true", help="as the Markdown table of docs/metrics.md")
    p.add_argument("--sql", action="store_true",
                   help="write the migrations' metric columns from collector/migrations/templates")
    p.add_argument("--check", action="store_true", help="with --sql: write nothing, exit 1 if a file is out of date")
    p.set_defaults(func=run)


def _sql(check: bool) -> int:
    # imported here: the store needs asyncpg, which the agent's image (and `gpuwatch export`) lacks
    from collector.store import sqlgen

    stale = sqlgen.check() if check else sqlgen.write()
    for path in stale:
        print(f"{'out of date' if check else 'wrote'}: {path}", file=sys.stderr)
    new = sqlgen.pending()
    if new:
        print(f"catalog rows without columns in any migration: {', '.join(c.key for c in new)}; "
              "add a migration to collector.store.sqlgen.GENERATED (add_metrics_sql writes both profiles')",
              file=sys.stderr)
    if not stale and not new:
        print("generated SQL is current", file=sys.stderr)
    return 1 if (check and stale) or new else 0


def run(args: argparse.Namespace) -> int:
    if args.check and not args.sql:
        print("gpuwatch catalog: --check goes with --sql", file=sys.stderr)
        return 2
    if args.sql:
        return _sql(args.check)
    if args.markdown:
        print(metrics_markdown(), end="")
    else:
        for m in CATALOG:
            print(f"{m.key}\t{m.unit}\t{m.kind}\t{m.source}\t{m.cost}")
    return 0
