"""SQLite: one writer at a time (no row locks), JSON as text, UTC times as fixed-width
text ("YYYY-MM-DD HH:MM:SS.ffffff", which sorts as it compares)."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from jobdesk.shared.core.driver.base import Driver, SelectT, TimeUnit, check_payload_key
from jobdesk.shared.core.models import jobs

#: Characters of the stored UTC text up to the end of its minute, hour and day.
_TEXT_WIDTH = {"minute": 16, "hour": 13, "day": 10}
#: The Julian day number of 1970-01-01 00:00 UTC.
_UNIX_EPOCH_JULIAN_DAY = 2440587.5


class SQLiteDriver(Driver):
    name: ClassVar[str] = "sqlite"
    listens: ClassVar[bool] = False
    locks_rows: ClassVar[bool] = False
    keeps_job_counts: ClassVar[bool] = False

    def insert(self, table: sa.Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        return query

    def estimate_count(self, conn: sa.Connection, query: sa.Select[Any]) -> int | None:
        return None

    def utc_truncated(self, column: Any, unit: TimeUnit) -> sa.ColumnElement[Any]:
        return sa.func.substr(column, 1, _TEXT_WIDTH[unit])

    def utc_date_text(self, column: Any) -> sa.ColumnElement[str]:
        return sa.func.substr(column, 1, _TEXT_WIDTH["day"])

    def epoch_seconds(self, moment: Any) -> sa.ColumnElement[float]:
        return (sa.func.julianday(moment) - _UNIX_EPOCH_JULIAN_DAY) * 86400.0

    def seconds_between(self, later: Any, earlier: Any) -> sa.ColumnElement[float]:
        return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0

    def epoch_bucket(self, moment: Any, seconds: int) -> sa.ColumnElement[int]:
        # Epoch seconds are positive, so truncating is flooring (and needs no math functions).
        return sa.cast((self.epoch_seconds(moment) + 30.0) / seconds, sa.BigInteger)

    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        # The two-argument max() is NULL when either side is.
        return sa.func.max(sa.func.coalesce(first, second), sa.func.coalesce(second, first))

    def payload_text_sql(self, key: str) -> str:
        # NULL, not an error, for a stored payload that is not JSON (a plain-SQL row).
        path = f"$.{check_payload_key(key)}"
        return f"(CASE WHEN json_valid(payload) THEN json_extract(payload, '{path}') END)"

    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        payload = jobs.c.payload
        return sa.case(
            (
                sa.func.json_valid(payload),
                sa.func.json_extract(payload, f"$.{check_payload_key(key)}"),
            ),
            else_=None,
        )
