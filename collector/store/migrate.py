"""Versioned SQL migrations, applied at start, once, by one replica at a time.

Why: the collector runs as several replicas that may start together against a database
that may be brand new, half-migrated or current. Each migration is a frozen SQL file
(``collector/migrations/{common,plain,timescale}/NNNN_name.sql``); a profile's list is
the common files plus its own, in version order. Every file is applied in its own
transaction together with its ``schema_migrations`` row, so a crash leaves either all
of a migration or none of it, and re-running is a no-op. ``pg_advisory_lock`` makes a
second replica wait until the first has finished instead of racing it.

The profile (``timescale`` or ``plain``) is chosen once per database and recorded in
every ``schema_migrations`` row: ``auto`` picks ``timescale`` when the ``timescaledb``
extension is available and can be created, and later starts follow the recorded
profile. Asking explicitly for the other profile is refused (:class:`ProfileMismatch`),
because the two profiles' objects have the same names but are different objects.
A file whose text changed after it was applied is refused too (:class:`MigrationError`):
an applied migration is history, fixes go into a new file.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal, cast

import asyncpg

Profile = Literal["timescale", "plain"]
PROFILES: Final[tuple[Profile, ...]] = ("timescale", "plain")

#: pg_advisory_lock key of the migration run ("gpuwatch" as 8 bytes, big-endian).
MIGRATE_LOCK_KEY: Final = int.from_bytes(b"gpuwatch", "big") & 0x7FFF_FFFF_FFFF_FFFF

_FILE_RE: Final = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

log = logging.getLogger(__name__)
_DEADLOCK_TRIES: Final = 5  # a migration PostgreSQL cancelled to break a deadlock is applied again, this often

_BOOTSTRAP_SQL: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    profile text NOT NULL CHECK (profile IN ('timescale', 'plain')),
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(RuntimeError):
    """The database's schema cannot be brought to what this collector expects."""


class ProfileMismatch(MigrationError):
    """The database was set up for the other profile than the one asked for."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    directory: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.directory}/{self.version:04d}_{self.name}.sql"


def _read_dir(directory: str) -> list[Migration]:
    root = resources.files("collector").joinpath("migrations").joinpath(directory)
    found: list[Migration] = []
    for entry in root.iterdir():
        match = _FILE_RE.match(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                raise MigrationError(f"migration file name {directory}/{entry.name} is not NNNN_name.sql")
            continue
        found.append(Migration(int(match.group(1)), match.group(2), directory, entry.read_text(encoding="utf-8")))
    return found


def load_migrations(profile: Profile) -> list[Migration]:
    """The common migrations and the profile's own, in version order (versions unique)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    migrations = sorted(_read_dir("common") + _read_dir(profile), key=lambda m: m.version)
    for before, after in itertools.pairwise(migrations):
        if before.version == after.version:
            raise MigrationError(f"two migrations with version {before.version}: {before.filename}, {after.filename}")
    return migrations


async def _timescale_installed(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb')"))


async def _timescale_available(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb')"))


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The profile a database runs with, and why (said at start-up)."""

    profile: Profile
    reason: str


class TimescaleProbeLost(MigrationError):
    """Trying to create the extension cost the connection (TimescaleDB that is not preloaded
    answers ``CREATE EXTENSION`` with FATAL); the caller retries on a new connection."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: errors of a connection that may be gone (a FATAL closes it)
_LOST: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


def _closed(conn: asyncpg.Connection) -> bool:
    """Whether ``conn`` is gone; a pool's proxy raises once its dead connection was released."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


async def _try_create_timescale(conn: asyncpg.Connection) -> str | None:
    """Create the extension if possible; None on success, else why not.

    Raises :class:`TimescaleProbeLost` when the attempt closed the connection.
    """
    if await _timescale_installed(conn):
        return None
    if not await _timescale_available(conn):
        return "the timescaledb extension is not available on this server"
    preload = str(await conn.fetchval("SELECT current_setting('shared_preload_libraries')"))
    try:
        async with conn.transaction():
            await conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
    except _LOST as exc:  # e.g. not in shared_preload_libraries (FATAL), or no privilege
        cause: BaseException = exc
        while isinstance(cause, asyncpg.InterfaceError) and cause.__context__ is not None:
            cause = cause.__context__  # the server's own error, not "the connection is closed" after it
        text = " ".join(str(cause).split()) or type(cause).__name__
        reason = f"CREATE EXTENSION timescaledb failed: {text}"
        if "timescaledb" not in preload:
            reason += (f" (shared_preload_libraries is {preload!r}: add timescaledb there and restart "
                       "PostgreSQL to use the timescale profile)")
        if _closed(conn):
            raise TimescaleProbeLost(reason) from None
        return reason
    return None


async def _recorded_profile(conn: asyncpg.Connection) -> Profile | None:
    rows = await conn.fetch("SELECT DISTINCT profile FROM schema_migrations")
    profiles = sorted(str(r["profile"]) for r in rows)
    if len(profiles) > 1:
        raise MigrationError(f"schema_migrations mixes profiles {profiles}; this database needs manual repair")
    return cast(Profile, profiles[0]) if profiles else None


async def _resolve_profile(conn: asyncpg.Connection, requested: str, unusable: str | None = None) -> ProfileChoice:
    if requested not in ("auto", *PROFILES):
        raise ValueError(f"unknown profile {requested!r}; expected 'auto', 'timescale' or 'plain'")
    recorded = await _recorded_profile(conn)
    if recorded is not None and requested not in ("auto", recorded):
        raise ProfileMismatch(
            f"this database was set up with the {recorded!r} storage profile; refusing to start with "
            f"profile {requested!r} (use profile 'auto' or {recorded!r}, or a new database)"
        )
    if recorded == "timescale":
        if not await _timescale_installed(conn):
            raise MigrationError(
                "this database was set up with the 'timescale' profile but the timescaledb extension is gone"
            )
        return ProfileChoice("timescale", "this database was set up with it")
    if recorded == "plain":
        if requested == "auto" and await _timescale_available(conn):
            log.warning("timescaledb is available, but this database keeps its recorded 'plain' profile")
        return ProfileChoice("plain", "this database was set up with it")
    if requested == "plain":
        return ProfileChoice("plain", "asked for")
    why_not = unusable if unusable is not None else await _try_create_timescale(conn)
    if why_not is None:
        version = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
        return ProfileChoice("timescale", f"{'asked for; ' if requested == 'timescale' else ''}"
                                          f"the timescaledb extension {version} is installed")
    if requested == "timescale":
        raise MigrationError(f"profile 'timescale' was asked for, but {why_not}")
    return ProfileChoice("plain", why_not)


async def migrate(conn: asyncpg.Connection, profile: str = "auto") -> Profile:
    """Bring the database to the newest schema of its profile; returns the profile.

    Holds a session advisory lock for the whole run, so concurrent callers (replicas
    starting together) apply each migration exactly once.
    """
    return (await migrate_with_reason(conn, profile)).profile


async def migrate_pool(pool: asyncpg.Pool, profile: str = "auto") -> ProfileChoice:
    """:func:`migrate` on a connection of ``pool``; a profile probe that cost the
    connection is not tried again, on a new one."""
    unusable: str | None = None
    while True:
        try:
            async with pool.acquire() as conn:
                return await migrate_with_reason(conn, profile, unusable)
        except TimescaleProbeLost as lost:
            if unusable is not None:
                raise
            unusable = lost.reason
            log.debug("the timescaledb probe closed the connection; migrating on a new one")


async def _apply(conn: asyncpg.Connection, migration: Migration, profile: Profile) -> None:
    """One migration and its ``schema_migrations`` row in one transaction; again, after a pause, when
    PostgreSQL broke a deadlock by cancelling it. Why: on TimescaleDB each migration commits on its
    own, and the scheduler starts the policies of the earlier ones (a continuous aggregate's refresh)
    while a later one alters the same objects; on a real server (2.23.1) 3 of 11 fresh databases lost
    their first start to such a deadlock. The transaction rolled back whole, so running it again is
    safe, and by then the job has finished or waits for the migration.

    A migration's own ``RAISE WARNING`` (one that chose to leave something as it was, and says why)
    is logged as a warning naming the file; notices (TimescaleDB's chatter) are not."""

    def warned(_conn: object, message: asyncpg.PostgresLogMessage) -> None:
        if "WARNING" in (getattr(message, "severity_en", None), getattr(message, "severity", None)):
            log.warning("migration %s: %s", migration.filename, getattr(message, "message", message))

    conn.add_log_listener(warned)
    try:
        await _apply_once(conn, migration, profile)
    finally:
        conn.remove_log_listener(warned)


async def _apply_once(conn: asyncpg.Connection, migration: Migration, profile: Profile) -> None:
    for attempt in range(1, _DEADLOCK_TRIES + 1):
        try:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, profile, checksum) VALUES ($1, $2, $3, $4)",
                    migration.version, migration.name, profile, migration.checksum,
                )
            return
        except asyncpg.DeadlockDetectedError:
            if attempt == _DEADLOCK_TRIES:
                raise
            log.warning("migration %s deadlocked with another session (TimescaleDB's own jobs?) and was rolled "
                        "back; applying it again (%d of %d)", migration.filename, attempt + 1, _DEADLOCK_TRIES)
            await asyncio.sleep(0.5 * attempt)


async def migrate_with_reason(conn: asyncpg.Connection, profile: str = "auto",
                              unusable: str | None = None) -> ProfileChoice:
    """:func:`migrate`, returning why the profile was chosen; ``unusable``: why
    TimescaleDB cannot be used here, found by an earlier attempt (it is not probed again)."""
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATE_LOCK_KEY)
    try:
        await conn.execute(_BOOTSTRAP_SQL)
        choice = await _resolve_profile(conn, profile, unusable)
        chosen = choice.profile
        migrations = load_migrations(chosen)
        applied = {
            int(r["version"]): (str(r["name"]), str(r["checksum"]))
            for r in await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
        }
        known = {m.version for m in migrations}
        newer = sorted(v for v in applied if v not in known)
        if newer:
            log.warning("the database has migrations this collector does not know: %s (a newer collector?)", newer)
        for migration in migrations:
            if migration.version in applied:
                name, checksum = applied[migration.version]
                if checksum != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.filename} differs from the one applied as version "
                        f"{migration.version} ({name}); applied migrations must not change, add a new one"
                    )
                continue
            log.info("applying migration %s", migration.filename)
            await _apply(conn, migration, chosen)
        return choice
    finally:
        if not _closed(conn):
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATE_LOCK_KEY)
