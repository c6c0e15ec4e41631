"""Fresh databases migrated on a real TimescaleDB: how many first starts fail (local only).

Why: each migration commits on its own, and TimescaleDB's scheduler starts the refresh policies
of the earlier ones while a later migration alters the same continuous aggregates; on 2.23.1 that
deadlocked 3 of 11 first starts before the migration runner applied a cancelled migration again
(collector/store/migrate.py ``_apply``). This creates ``--count`` databases with the extension at
``--version``, opens the store on each with the timescale profile, and counts the failures and
the deadlocks the runner retried. It needs a server you built and started yourself (the docstring
of benchmarks/bench_timescale_compression.py says how); it never runs in CI::

    python benchmarks/timescale_migrate_deadlocks.py --dsn postgresql://postgres@127.0.0.1:55432/postgres \\
        --count 11 --version 2.23.1
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from collector.store import Store


class _Retries(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "deadlocked" in record.getMessage():
            self.count += 1


async def run(dsn: str, count: int, version: str, pause_s: float) -> tuple[int, int]:
    retries = _Retries()
    logging.getLogger("collector.store.migrate").addHandler(retries)
    failures = 0
    base = await asyncpg.connect(dsn)
    try:
        for i in range(count):
            name = f"gpuwatch_migrate_check_{i}"
            await base.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await base.execute(f"CREATE DATABASE {name}")
            db = dsn.rsplit("/", 1)[0] + "/" + name
            conn = await asyncpg.connect(db)
            await conn.execute(f"CREATE EXTENSION timescaledb VERSION '{version}'")
            await conn.close()
            try:
                store = await Store.open(db, profile="timescale")
                await store.close()
                print(f"{i}: ok", flush=True)
            except (asyncpg.PostgresError, OSError) as exc:
                failures += 1
                print(f"{i}: FAILED {type(exc).__name__}: {exc}", flush=True)
            await asyncio.sleep(pause_s)  # the scheduler's jobs run, as between a first start's steps
            await base.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await base.close()
    return failures, retries.count


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--dsn", required=True, help="a database on the TimescaleDB server (used to create the others)")
    p.add_argument("--count", type=int, default=11)
    p.add_argument("--version", default="2.23.1", help="the extension version to create")
    p.add_argument("--pause", type=float, default=3.0, help="seconds between two databases")
    args = p.parse_args()
    failures, retried = asyncio.run(run(args.dsn, args.count, args.version, args.pause))
    print(f"{failures} of {args.count} first starts failed; {retried} migrations deadlocked and were applied again")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
