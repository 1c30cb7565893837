"""The database clock's estimate never runs ahead of the database: a time a worker
stamps (an attempt's finish, from `DatabaseClock`) never sorts after one the database
stamps afterwards (the claim of the job that waited for it, from `db_now`)."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from jobdesk.shared.core.clock import DatabaseClock, db_now
from jobdesk.shared.core.driver import driver


def test_an_estimate_never_sorts_after_a_later_database_time(engine: sa.Engine) -> None:
    clock = DatabaseClock(engine)
    clock.sync()
    with engine.connect() as conn:
        for _ in range(300):
            estimate = clock.now()
            later = db_now(conn)
            conn.rollback()  # a new transaction: PostgreSQL's time moves on
            assert estimate <= later, (estimate, later)


def test_an_estimate_has_the_database_clocks_resolution(engine: sa.Engine) -> None:
    clock = DatabaseClock(engine)
    step = driver(engine).clock_step_microseconds
    stamps = [clock.now() for _ in range(50)]
    assert all(stamp.microsecond % step == 0 for stamp in stamps)
    assert all(stamp.tzinfo is UTC for stamp in stamps)
    assert abs((stamps[-1] - datetime.now(UTC)).total_seconds()) < 5
