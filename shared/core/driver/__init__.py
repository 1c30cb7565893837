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

from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:  # imported with the drivers: the schema imports this package's types
    from jobdesk.shared.core.driver.base import Driver

__all__ = ["driver", "driver_for_url", "driver_named"]

_DRIVERS: dict[str, Driver] = {}


def driver_named(dialect_name: str) -> Driver:
    """The driver of a dialect by its SQLAlchemy name (`postgresql`, `sqlite`)."""
    found = _DRIVERS.get(dialect_name)
    if found is not None:
        return found
    # Imported on first use: the implementations name the schema's tables, and the
    # schema imports this package's column types (and asks it for its triggers).
    if dialect_name == "postgresql":
        from jobdesk.shared.core.driver.postgresql import PostgreSQLDriver

        found = PostgreSQLDriver()
    elif dialect_name == "sqlite":
        from jobdesk.shared.core.driver.sqlite import SQLiteDriver

        found = SQLiteDriver()
    else:
        raise ValueError(f"Jobdesk runs on PostgreSQL and SQLite, not {dialect_name!r}")
    _DRIVERS[dialect_name] = found
    return found


def driver_for_url(url: sa.URL) -> tuple[Driver, sa.URL]:
    """The driver of a database URL, and the URL with its default DBAPI made explicit
    (`postgresql://` means psycopg 3 here); ValueError naming an unsupported database."""
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {backend!r}")
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return driver_named(backend), url


def driver(bind: sa.Connection | sa.Engine) -> Driver:
    """The driver for this connection's (or engine's) database."""
    return driver_named(bind.dialect.name)
