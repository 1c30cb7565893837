"""Reading history: minutes summed into the range's buckets, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.history.rollup import add_buckets, roll_up
from jobdesk.shared.operator.queries.history import HistoryFilters, read_history
from tests.factories import make_job

NOW = datetime(2026, 3, 4, 12, 37, 30, tzinfo=UTC)


def minute(
    conn: sa.Connection, at: datetime, queue: str, job_type: str, processed: int, wait_max: float
) -> None:
    row = {
        "minute": at,
        "queue": queue,
        "job_type": job_type,
        "processed": processed,
        "failed": 0,
        "dead": 0,
        "waited": processed,
        "wait_seconds_sum": processed * 1.0,
        "wait_seconds_max": wait_max,
    }
    add_buckets(conn, [row])


def test_minutes_fold_into_aligned_buckets_with_filters(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        minute(conn, datetime(2026, 3, 4, 12, 30, tzinfo=UTC), "email", "mail.send", 3, 2.0)
        minute(conn, datetime(2026, 3, 4, 12, 44, tzinfo=UTC), "email", "mail.send", 1, 9.0)
        minute(conn, datetime(2026, 3, 4, 12, 29, tzinfo=UTC), "reports", "report.build", 5, 4.0)
        minute(conn, datetime(2026, 3, 2, 1, 59, tzinfo=UTC), "email", "mail.send", 7, 1.0)
    with engine.connect() as conn:
        day = read_history(conn, HistoryFilters(span="24h"), now=NOW)
        week = read_history(conn, HistoryFilters(span="7d"), now=NOW)
        email = read_history(conn, HistoryFilters(span="24h", queue="email"), now=NOW)
        report = read_history(conn, HistoryFilters(span="24h", job_type="report.build"), now=NOW)

    assert len(day.buckets) == 96
    assert day.end == datetime(2026, 3, 4, 12, 45, tzinfo=UTC), "the newest bucket is filling"
    last, before = day.buckets[-1], day.buckets[-2]
    assert last.start == datetime(2026, 3, 4, 12, 30, tzinfo=UTC)
    assert (last.processed, last.wait_seconds_max, last.wait_seconds_mean) == (4, 9.0, 1.0)
    assert (before.start, before.processed) == (datetime(2026, 3, 4, 12, 15, tzinfo=UTC), 5)
    assert day.total("processed") == 9, "two days ago is outside 24 h"
    assert day.queues == ["email", "reports"]
    assert day.job_types == ["mail.send", "report.build"]

    assert len(week.buckets) == 84
    assert week.buckets[-1].start == datetime(2026, 3, 4, 12, tzinfo=UTC)
    assert week.buckets[-1].processed == 9
    old = next(b for b in week.buckets if b.processed == 7)
    assert old.start == datetime(2026, 3, 2, 0, tzinfo=UTC)

    assert email.total("processed") == 4
    assert email.queues == ["email", "reports"], "the choices stay the range's"
    assert report.total("processed") == 5
    assert report.wait_seconds_max == 4.0


def test_attempts_past_the_watermark_count_live_and_never_twice(engine: sa.Engine) -> None:
    """The rollup has counted the first job; the second finished since: both show, and
    once the rollup takes the second too the totals stay the same."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for ago in (timedelta(minutes=10), timedelta(seconds=5)):
            job_id = make_job(conn, queue="email", job_type="mail.send", status="succeeded")
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id,
                    attempt=1,
                    started_at=now - ago,
                    finished_at=now - ago,
                    outcome="succeeded",
                )
            )
    roll_up(engine, now)  # settles the first attempt only (the second is too fresh)
    with engine.connect() as conn:
        live = read_history(conn, HistoryFilters(span="1h"), now=now)
    assert live.total("processed") == 2
    assert live.live_tail
    assert not live.tail_cut
    assert live.queues == ["email"]

    later = now + timedelta(minutes=5)
    roll_up(engine, later)
    with engine.connect() as conn:
        settled = read_history(conn, HistoryFilters(span="1h"), now=later)
    assert settled.total("processed") == 2
    assert not settled.live_tail
