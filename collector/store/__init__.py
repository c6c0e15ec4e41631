"""The collector's storage layer: PostgreSQL, with or without TimescaleDB.

Why a package of its own: storage is the collector's one seam to the database. It owns
the schema (versioned SQL migrations under ``collector/migrations``, applied at start),
the idempotent batch writer the consumer calls before committing Kafka offsets, the
plain-profile housekeeping that TimescaleDB policies do otherwise, and the read queries
the API uses. Both profiles expose the same table and view names, so nothing outside
this package needs to know which one is running.
"""

from collector.store.migrate import MigrationError, Profile, ProfileChoice, ProfileMismatch, migrate
from collector.store.queries import Latest, Series
from collector.store.writer import (
    DB_UNAVAILABLE,
    BadRecord,
    Store,
    StoreRefused,
    WriteResult,
    validate,
    validate_event,
)

__all__ = [
    "DB_UNAVAILABLE",
    "BadRecord",
    "Latest",
    "MigrationError",
    "Profile",
    "ProfileChoice",
    "ProfileMismatch",
    "Series",
    "Store",
    "StoreRefused",
    "WriteResult",
    "migrate",
    "validate",
    "validate_event",
]
