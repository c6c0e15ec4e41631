"""What the database driver raises, named once for everyone outside the store.

Why: the store is the only way into the database, so only ``collector/store`` imports the
driver (asyncpg; an import-linter contract holds it). The API's error handlers, the
background rounds, shutdown and the command line's one-line errors still need to tell
"the database is away for now" from "this never works" and from "the data was refused";
they take the names here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import asyncpg

#: the database (or network) is away for now: the next round retries
TRANSIENT: Final[tuple[type[BaseException], ...]] = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
#: the database cannot be reached at all (a request gets 503, not 500)
UNREACHABLE: Final[tuple[type[Exception], ...]] = (
    OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.exceptions.OperatorInterventionError)
#: a value PostgreSQL refused as data (a bad parameter: 4xx)
DataError: Final = asyncpg.DataError
#: a table the migrations have not made (yet): the feature is not there
UndefinedTable: Final = asyncpg.UndefinedTableError


def never_works(exc: BaseException) -> bool:
    """A connection failure that waiting cannot mend: the login, the database name or the DSN."""
    return isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
                      | asyncpg.InvalidCatalogNameError | asyncpg.ClientConfigurationError | ValueError)


def explain(exc: BaseException, db: str, fix: str, raised_in_driver: Callable[[BaseException], bool]) -> str | None:
    """One line for a database failure at start (``db`` names it, ``fix`` says where it was given)."""
    if isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError):
        return f"{db} refused the login: {exc}; check the user name and password in {fix}"
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"{db}: {exc}; create that database or name another in {fix}"
    if isinstance(exc, asyncpg.PostgresError):
        return f"{db}: {exc} (SQLSTATE {exc.sqlstate})"
    bad_dsn = isinstance(exc, ValueError) and raised_in_driver(exc)
    if isinstance(exc, asyncpg.ClientConfigurationError) or bad_dsn:
        return (f"invalid DSN {db.removeprefix('PostgreSQL at ')}: {str(exc).removeprefix('invalid DSN: ')}; expected "
                "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
    if isinstance(exc, asyncpg.InterfaceError):
        return f"{db}: {exc}"
    return None


async def connect(dsn: str) -> Any:
    """One connection (not a pool) for a short command such as ``gpuwatch token``."""
    return await asyncpg.connect(dsn)
