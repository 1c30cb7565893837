"""Column types that behave the same on SQLite and PostgreSQL.

- `UTCDateTime`: always returns timezone-aware UTC datetimes and refuses naive ones.
  SQLite has no time zones, so values are stored as fixed-width UTC text
  (`YYYY-MM-DD HH:MM:SS.ffffff`), which sorts and compares correctly as text — the claim
  and the reaper compare timestamps inside SQL.
- `JSONDocument`: JSONB on PostgreSQL, JSON text on SQLite.
- `utcnow()`: the database clock as a SQL expression, usable as a server default so a
  plain-SQL `INSERT` from any language gets the same timestamps as the Python API.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

SQLITE_TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp that is UTC and timezone-aware in Python on every backend."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(32))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("naive datetime: pass a timezone-aware datetime (UTC)")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.strftime(SQLITE_TIMESTAMP_FORMAT)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)


JSONDocument = sa.JSON().with_variant(JSONB(), "postgresql")


class utcnow(FunctionElement[datetime]):
    """The database's current UTC time, in the storage format of `UTCDateTime`."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(utcnow, "postgresql")
def _utcnow_postgresql(element: utcnow, compiler: Any, **kw: Any) -> str:
    # statement_timestamp(), not now(): a long transaction must not see time stand still
    return "statement_timestamp()"


@compiles(utcnow, "sqlite")
def _utcnow_sqlite(element: utcnow, compiler: Any, **kw: Any) -> str:
    # %f has milliseconds; pad to the microsecond width Python writes, so stored values
    # of both origins have one fixed width.
    return "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"


@compiles(utcnow)
def _utcnow_default(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"
