"""A database of its own on the session's PostgreSQL, for a module's tests (created, then dropped)."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

from tests.fixtures_pg import PgServer

_counter = itertools.count()


@contextlib.contextmanager
def fresh_database(pg_server: PgServer, prefix: str) -> Iterator[str]:
    """The DSN of a new empty database; dropped (with its connections) on exit."""
    pg_server.start()  # a previous test may have stopped the server
    name = f"{prefix}_{os.getpid()}_{next(_counter)}"
    pg_server.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield pg_server.dsn(name)
    finally:
        pg_server.start()
        pg_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
