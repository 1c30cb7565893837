"""`Driver`: what Jobdesk needs from a database, stated once; one subclass per dialect.

The methods come in groups: capabilities (what this database offers at all),
statements for tables that need a dialect's own upsert or locking, and SQL expressions
whose spelling differs (time buckets, JSON fields, epochs). Each says what it returns
on both databases, so callers never need to know which one they have.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import Insert as PostgreSQLInsert
from sqlalchemy.dialects.sqlite import Insert as SQLiteInsert

from jobdesk.shared.core.models import jobs

SelectT = TypeVar("SelectT", bound=sa.Select[Any])
T = TypeVar("T")

#: The INSERT of either dialect: both offer `on_conflict_do_nothing/do_update` and
#: `excluded` with the same arguments.
UpsertInsert = PostgreSQLInsert | SQLiteInsert
TimeUnit = Literal["minute", "hour", "day"]


class Driver(ABC):
    """One database's way of doing what Jobdesk asks (see the package)."""

    #: SQLAlchemy's dialect name.
    name: ClassVar[str]
    #: Workers can be woken by LISTEN/NOTIFY (else they poll).
    listens: ClassVar[bool]
    #: Row locks exist (`FOR UPDATE`); without them a transaction locks the database.
    locks_rows: ClassVar[bool]
    #: Triggers keep `jobdesk_job_counts` (else counts are read off the jobs).
    keeps_job_counts: ClassVar[bool]

    # --- the jobs table ---------------------------------------------------------------
    # Every statement that writes `jobdesk_jobs` is here (a test checks it).

    def set_progress(self, conn: sa.Connection, job_id: int, progress: dict[str, Any]) -> bool:
        """Store a job's progress for someone other than its worker (a report run
        mirroring its chunks); the worker's own progress is fenced (`record_progress`)."""
        done = conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(progress=progress))
        return bool(done.rowcount)

    # --- per-database declarations -------------------------------------------------------

    def choose(self, *, postgresql: T, sqlite: T) -> T:
        """The value declared for this database: schema objects a feature declares per
        database (its triggers and their functions) are picked here, never by a test of
        the dialect."""
        chosen: T = {"postgresql": postgresql, "sqlite": sqlite}[self.name]
        return chosen

    # --- statements ----------------------------------------------------------------

    @abstractmethod
    def insert(self, table: sa.Table) -> UpsertInsert:
        """An INSERT into `table` that can say what to do ON CONFLICT."""

    @abstractmethod
    def for_update(self, query: SelectT, *, skip_locked: bool = False) -> SelectT:
        """`query` locking the rows it reads until the transaction ends (PostgreSQL); on
        SQLite unchanged — its write transaction already excludes every other writer."""

    @abstractmethod
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
        """Take up to `want` whole tokens from rate-limit bucket `key` (refilled up to
        `capacity` at `refill_per_second` since it was last written; a new bucket
        starts full): `(taken, level left)` with `taken >= 1`, or `(0, level)` having
        written nothing when not one whole token is there."""

    @abstractmethod
    def statement_deadline(
        self, conn: sa.Connection, seconds: float
    ) -> AbstractContextManager[None]:
        """Bound every statement run inside the block (the caller's open transaction)."""

    @abstractmethod
    def estimate_count(self, conn: sa.Connection, query: sa.Select[Any]) -> int | None:
        """The planner's estimate of how many rows `query` returns, or None when the
        database has none to give (SQLite)."""

    # --- expressions ---------------------------------------------------------------

    @abstractmethod
    def utc_truncated(self, column: Any, unit: TimeUnit) -> sa.ColumnElement[Any]:
        """A UTC timestamp column cut to the start of its minute, hour or day: a
        timestamp on PostgreSQL, fixed-width text ("YYYY-MM-DD HH:MM") on SQLite; either
        groups and compares in time order."""

    @abstractmethod
    def utc_date_text(self, column: Any) -> sa.ColumnElement[str]:
        """A UTC timestamp column's date as "YYYY-MM-DD" text."""

    @abstractmethod
    def epoch_seconds(self, moment: Any) -> sa.ColumnElement[float]:
        """Seconds since 1970-01-01 UTC of a timestamp column."""

    @abstractmethod
    def seconds_between(self, later: Any, earlier: Any) -> sa.ColumnElement[float]:
        """`later - earlier` in seconds (a float)."""

    @abstractmethod
    def epoch_bucket(self, moment: Any, seconds: int) -> sa.ColumnElement[int]:
        """Which `seconds`-long bucket since the epoch a minute falls in (half a minute
        added, so float rounding never drops a whole minute into the bucket before)."""

    @abstractmethod
    def contains_like(self, column: Any, pattern: str, escape: str) -> sa.ColumnElement[bool]:
        """`column LIKE pattern` ignoring case, as the database's text search indexes
        serve it (PostgreSQL: ILIKE through trigram indexes; SQLite: LIKE, which ignores
        ASCII case)."""

    @abstractmethod
    def payload_match(self, path: tuple[str, ...], values: Sequence[Any]) -> sa.ColumnElement[bool]:
        """Jobs whose payload holds one of `values` (JSON scalars) at `path` (at most two
        keys deep), as an index lookup (PostgreSQL: JSONB containment through the GIN
        index; SQLite: a probe of `jobdesk_payload_terms`)."""

    @abstractmethod
    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        """The larger of two values, ignoring a NULL one (NULL when both are)."""

    @abstractmethod
    def payload_text_sql(self, key: str) -> str:
        """SQL text for the top-level string `key` of `payload` in a statement over
        `jobdesk_jobs` (NULL when the payload has none, or — SQLite — is not JSON at
        all), spelled the way the database's indexes on that field spell it, so the
        planner can use them."""

    @abstractmethod
    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        """`payload_text_sql(key)` as a column expression of `jobdesk_jobs`."""


def check_payload_key(key: str) -> str:
    """Keys written into SQL text: letters, digits and underscores only."""
    if not key or not key.replace("_", "").isalnum():
        raise ValueError(f"payload key {key!r}: letters, digits and _ only")
    return key


def refilled(
    tokens: float, elapsed_seconds: float, capacity: float, refill_per_second: float
) -> float:
    """A token bucket's level after `elapsed_seconds` of refill (never above capacity)."""
    return min(capacity, tokens + max(0.0, elapsed_seconds) * refill_per_second)


def first_take(capacity: float, want: int) -> int:
    """What the first taker of a new (full) bucket gets."""
    return min(want, math.floor(capacity))
