"""The database driver: every difference between PostgreSQL and SQLite, in one place.

Jobdesk runs the same code on both databases; where their SQL differs — the claim, a
batch completion, an upsert, a time bucket, a trigger, an estimate — the code asks the
connection's driver (`driver(conn)`) instead of testing the dialect itself. Each
dialect is one class (`PostgreSQLDriver`, `SQLiteDriver`) implementing `Driver`; a
conformance suite (`tests/shared/core/driver/`) runs the same tests against both, and
a test fails on any dialect test outside this package.

Statements are SQLAlchemy constructs or `text()` with bound parameters (`:name`), so
they serve any SQLAlchemy driver of the database — psycopg, asyncpg, aiosqlite — sync
or async.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobdesk.shared.core.driver.base import Driver
from jobdesk.shared.core.driver.postgresql import PostgreSQLDriver
from jobdesk.shared.core.driver.sqlite import SQLiteDriver

__all__ = ["Driver", "PostgreSQLDriver", "SQLiteDriver", "driver", "driver_named"]

_DRIVERS: dict[str, Driver] = {"postgresql": PostgreSQLDriver(), "sqlite": SQLiteDriver()}


def driver_named(dialect_name: str) -> Driver:
    """The driver of a dialect by its SQLAlchemy name (`postgresql`, `sqlite`)."""
    try:
        return _DRIVERS[dialect_name]
    except KeyError:
        raise ValueError(f"Jobdesk runs on PostgreSQL and SQLite, not {dialect_name!r}") from None


def driver(bind: sa.Connection | sa.Engine) -> Driver:
    """The driver for this connection's (or engine's) database."""
    return driver_named(bind.dialect.name)
