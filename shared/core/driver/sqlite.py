"""SQLite: one writer at a time (no row locks), JSON as text, UTC times as fixed-width
text ("YYYY-MM-DD HH:MM:SS.ffffff", which sorts as it compares)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from jobdesk.shared.core.driver.base import (
    SelectT,
    TimeUnit,
    check_payload_key,
    first_take,
    refilled,
)
from jobdesk.shared.core.driver.sqlite_engine import make_sqlite_engine
from jobdesk.shared.core.driver.sqlite_jobs import SQLiteJobs
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.payload_terms import payload_terms, term_value
from jobdesk.shared.settings import Settings

#: Characters of the stored UTC text up to the end of its minute, hour and day.
_TEXT_WIDTH = {"minute": 16, "hour": 13, "day": 10}
#: The Julian day number of 1970-01-01 00:00 UTC.
_UNIX_EPOCH_JULIAN_DAY = 2440587.5


_BUCKET = sa.text("SELECT tokens, updated_at FROM jobdesk_rate_limits WHERE key = :key").columns(
    tokens=sa.Float(), updated_at=UTCDateTime()
)
_CREATE_BUCKET = sa.text(
    "INSERT INTO jobdesk_rate_limits (key, tokens, updated_at) VALUES (:key, :tokens, :now)"
).bindparams(sa.bindparam("now", type_=UTCDateTime()))
_SET_BUCKET = sa.text(
    "UPDATE jobdesk_rate_limits SET tokens = :tokens, updated_at = :now WHERE key = :key"
).bindparams(sa.bindparam("now", type_=UTCDateTime()))


class SQLiteDriver(SQLiteJobs):
    name: ClassVar[str] = "sqlite"
    listens: ClassVar[bool] = False
    locks_rows: ClassVar[bool] = False
    keeps_job_counts: ClassVar[bool] = False
    writes_in_ctes: ClassVar[bool] = False
    clock_step_microseconds: ClassVar[int] = 1000

    def make_engine(
        self,
        url: sa.URL,
        *,
        settings: Settings,
        sqlite_begin: str,
        pool_size: int,
        application_name: str,
        index_plans: bool,
        idle_in_transaction_seconds: float | None,
    ) -> sa.Engine:
        return make_sqlite_engine(url.render_as_string(hide_password=False), sqlite_begin)

    def insert(self, table: sa.Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def for_update(
        self, query: SelectT, *, skip_locked: bool = False, key_share: bool = False
    ) -> SelectT:
        return query

    def take_tokens(
        self,
        conn: sa.Connection,
        key: str,
        want: int,
        *,
        capacity: float,
        refill_per_second: float,
        now: datetime,
    ) -> tuple[int, float]:
        # The transaction began with BEGIN IMMEDIATE: this read-modify-write is the only
        # writer of the database until it commits.
        row = conn.execute(_BUCKET, {"key": key}).first()
        if row is None:
            first = first_take(capacity, want)
            conn.execute(_CREATE_BUCKET, {"key": key, "tokens": capacity - first, "now": now})
            return first, capacity - first
        level = refilled(
            row.tokens, (now - row.updated_at).total_seconds(), capacity, refill_per_second
        )
        if level < 1.0:
            return 0, level
        taken = min(want, math.floor(level))
        conn.execute(
            _SET_BUCKET, {"key": key, "tokens": level - taken, "now": max(now, row.updated_at)}
        )
        return taken, level - taken

    @contextmanager
    def statement_deadline(self, conn: sa.Connection, seconds: float) -> Iterator[None]:
        # No statement timeout here: a progress handler interrupts a statement that runs
        # past the deadline.
        raw: Any = conn.connection.dbapi_connection
        deadline = time.monotonic() + seconds

        def _over_time() -> int:
            return 1 if time.monotonic() > deadline else 0

        raw.set_progress_handler(_over_time, 10_000)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)

    def refill_slots(
        self, conn: sa.Connection, *, after_key: str, max_keys: int
    ) -> tuple[int, str | None]:
        return 0, None  # one writer at a time: the row triggers see every freed slot

    def notify_queues(self, conn: sa.Connection, queues: Sequence[str]) -> None:
        return  # no LISTEN here: idle workers poll

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

    def contains_like(self, column: Any, pattern: str, escape: str) -> sa.ColumnElement[bool]:
        return sa.type_coerce(column, sa.Text).like(pattern, escape=escape)

    def payload_match(self, path: tuple[str, ...], values: Sequence[Any]) -> sa.ColumnElement[bool]:
        t = payload_terms.c
        found = sa.select(t.job_id).where(
            t.path == ".".join(path), t.value.in_([term_value(value) for value in values])
        )
        return sa.literal_column("jobdesk_jobs.id").in_(found)

    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        # The two-argument max() is NULL when either side is.
        return sa.func.max(sa.func.coalesce(first, second), sa.func.coalesce(second, first))

    def payload_text_sql(self, key: str) -> str:
        return _payload_field("payload", key)

    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        # Qualified, so it binds to the jobs table whatever else the statement joins.
        return sa.literal_column(_payload_field("jobdesk_jobs.payload", key), sa.String())


def _payload_field(column: str, key: str) -> str:
    # NULL, not an error, for a stored payload that is not JSON (a plain-SQL row).
    path = f"$.{check_payload_key(key)}"
    return f"(CASE WHEN json_valid({column}) THEN json_extract({column}, '{path}') END)"
