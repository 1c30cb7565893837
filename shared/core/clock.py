"""The database clock: the one time source for leases, claims and backoff.

Workers on different hosts disagree about the time; the database does not. `db_now`
asks the database once; `DatabaseClock` samples it and then advances with the local
monotonic clock, so a worker whose wall clock is an hour off (or jumps) still agrees
with the database without paying a round trip on every claim. It re-samples
periodically and exposes the measured skew for the dashboard.

Its estimate never runs ahead of the database: it counts from the end of the sampling
round trip (the sample cannot be later than that) and is cut to the database clock's
resolution. A time a worker stamps (an attempt's finish) therefore never sorts after
one the database stamps later (the claim of the job that waited for it).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.types import utcnow

RESYNC_INTERVAL = timedelta(minutes=1)


def db_now(conn: sa.Connection) -> datetime:
    """The database's current UTC time."""
    value = conn.execute(sa.select(utcnow())).scalar_one()
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class DatabaseClock:
    """Database time without a round trip per call, anchored to `time.monotonic()`."""

    def __init__(self, engine: sa.Engine, resync: timedelta = RESYNC_INTERVAL) -> None:
        self._engine = engine
        self._resync_seconds = resync.total_seconds()
        self._step = driver(engine).clock_step_microseconds
        self._lock = threading.Lock()
        self._anchor_db: datetime | None = None
        self._anchor_mono = 0.0
        self.skew = timedelta(0)

    def sync(self) -> None:
        """Sample the database clock (raises if the database is unreachable)."""
        with self._engine.connect() as conn:
            value = db_now(conn)
            after = time.monotonic()
            conn.rollback()
        wall = datetime.now(UTC)
        with self._lock:
            # Taken somewhere in the round trip: counting from its end keeps every
            # estimate at or before the database's own time.
            self._anchor_db = value
            self._anchor_mono = after
            self.skew = wall - value

    def now(self) -> datetime:
        with self._lock:
            anchor = self._anchor_db
            elapsed = time.monotonic() - self._anchor_mono
        if anchor is None or elapsed > self._resync_seconds:
            try:
                self.sync()
            except sa.exc.SQLAlchemyError:
                if anchor is None:
                    raise
                # Database briefly unreachable: keep counting from the last sample.
                return self._cut(anchor + timedelta(seconds=elapsed))
            return self.now()
        return self._cut(anchor + timedelta(seconds=elapsed))

    def _cut(self, value: datetime) -> datetime:
        return value - timedelta(microseconds=value.microsecond % self._step)
