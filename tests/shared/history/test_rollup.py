"""The history rollup on both databases: attempts land in their finish minute, a re-run
counts nothing twice, late attempts still count, expired buckets go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.history import rollup
from jobdesk.shared.history.models import history_hours, history_minutes
from jobdesk.shared.history.rollup import KEEP, SETTLE, prune, roll_up, watermark
from tests.factories import make_job

NOW = datetime(2026, 3, 4, 12, 30, 20, tzinfo=UTC)
MINUTE = datetime(2026, 3, 4, 12, 10, tzinfo=UTC)


def attempt(
    conn: sa.Connection,
    job_id: int,
    number: int,
    started: datetime,
    finished: datetime,
    outcome: str,
) -> None:
    conn.execute(
        sa.insert(job_attempts).values(
            job_id=job_id, attempt=number, started_at=started, finished_at=finished, outcome=outcome
        )
    )


def finished_job(
    conn: sa.Connection,
    *,
    runnable: datetime,
    started: datetime,
    finished: datetime,
    status: str = "succeeded",
    outcome: str = "succeeded",
    queue: str = "default",
    job_type: str = "mail.send",
) -> int:
    job_id = make_job(
        conn,
        job_type=job_type,
        queue=queue,
        status=status,
        attempts=1,
        next_run_at=runnable,
        started_at=started,
        finished_at=finished,
    )
    attempt(conn, job_id, 1, started, finished, outcome)
    return job_id


def buckets(conn: sa.Connection) -> dict[tuple[datetime, str, str], dict[str, Any]]:
    rows = conn.execute(sa.select(history_minutes)).mappings()
    return {(r["minute"], r["queue"], r["job_type"]): dict(r) for r in rows}


def test_attempts_land_in_the_minute_they_finished_with_their_wait(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for seconds, wait in ((5, 2.0), (40, 6.0)):
            finished_job(
                conn,
                runnable=MINUTE + timedelta(seconds=seconds - wait),
                started=MINUTE + timedelta(seconds=seconds),
                finished=MINUTE + timedelta(seconds=seconds + 1),
            )
        # A retry that went dead: the earlier attempt's runnable moment is gone.
        dead = make_job(
            conn,
            job_type="mail.send",
            status="dead",
            attempts=2,
            max_attempts=2,
            next_run_at=MINUTE + timedelta(seconds=20),
            finished_at=MINUTE + timedelta(seconds=30),
        )
        attempt(
            conn, dead, 1, MINUTE - timedelta(minutes=1), MINUTE - timedelta(seconds=50), "failed"
        )
        attempt(
            conn, dead, 2, MINUTE + timedelta(seconds=25), MINUTE + timedelta(seconds=30), "timeout"
        )
        finished_job(
            conn,
            queue="reports",
            job_type="report.build",
            runnable=MINUTE,
            started=MINUTE,
            finished=MINUTE + timedelta(seconds=3),
            status="cancelled",
            outcome="cancelled",
        )

    done = roll_up(engine, NOW)

    assert done.attempts == 4
    with engine.connect() as conn:
        found = buckets(conn)
        assert watermark(conn)[1] == NOW - SETTLE
    assert set(found) == {
        (MINUTE, "default", "mail.send"),
        (MINUTE - timedelta(minutes=1), "default", "mail.send"),
        (MINUTE, "reports", "report.build"),
    }
    cancelled = found[(MINUTE, "reports", "report.build")]
    # Neither processed nor failed, but it did wait in its queue.
    assert (cancelled["processed"], cancelled["failed"], cancelled["waited"]) == (0, 0, 1)
    this = found[(MINUTE, "default", "mail.send")]
    assert (this["processed"], this["failed"], this["dead"]) == (2, 1, 1)
    assert this["waited"] == 3  # both successes and the dead job's last attempt (5 s)
    assert abs(this["wait_seconds_sum"] - 13.0) < 0.01
    assert abs(this["wait_seconds_max"] - 6.0) < 0.01
    earlier = found[(MINUTE - timedelta(minutes=1), "default", "mail.send")]
    assert (earlier["processed"], earlier["failed"], earlier["dead"], earlier["waited"]) == (
        0,
        1,
        0,
        0,
    )


def test_a_rerun_counts_nothing_twice(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        finished_job(conn, runnable=MINUTE, started=MINUTE, finished=MINUTE + timedelta(seconds=1))
    assert roll_up(engine, NOW).attempts == 1
    assert roll_up(engine, NOW).attempts == 0
    assert roll_up(engine, NOW + timedelta(minutes=5)).attempts == 0
    with engine.connect() as conn:
        assert [b["processed"] for b in buckets(conn).values()] == [1]


def test_fresh_attempts_wait_until_they_settled(engine: sa.Engine) -> None:
    fresh = NOW - SETTLE + timedelta(seconds=10)
    with engine.begin() as conn:
        finished_job(conn, runnable=fresh, started=fresh, finished=fresh)
    assert roll_up(engine, NOW).attempts == 0
    assert roll_up(engine, NOW + timedelta(seconds=30)).attempts == 1


def test_late_attempts_still_count_in_their_minute(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        finished_job(conn, runnable=MINUTE, started=MINUTE, finished=MINUTE + timedelta(seconds=1))
    roll_up(engine, NOW)
    with engine.begin() as conn:
        # A completion held back (say by a database outage) arrives after its minute was
        # rolled up, and a long job started long before it finished.
        finished_job(
            conn,
            runnable=MINUTE,
            started=MINUTE + timedelta(seconds=2),
            finished=MINUTE + timedelta(seconds=50),
            status="failed",
            outcome="failed",
        )
        finished_job(
            conn,
            runnable=NOW - timedelta(hours=3),
            started=NOW - timedelta(hours=2),
            finished=MINUTE + timedelta(minutes=5),
        )
    assert roll_up(engine, NOW).attempts == 2
    with engine.connect() as conn:
        found = buckets(conn)
    assert found[(MINUTE, "default", "mail.send")]["processed"] == 1
    assert found[(MINUTE, "default", "mail.send")]["failed"] == 1
    long = found[(MINUTE + timedelta(minutes=5), "default", "mail.send")]
    assert long["processed"] == 1
    assert abs(long["wait_seconds_max"] - 3600.0) < 0.01
    with engine.connect() as conn:
        [hour] = conn.execute(sa.select(history_hours)).mappings().all()
    assert hour["hour"] == MINUTE.replace(minute=0)
    assert (hour["processed"], hour["failed"], hour["waited"]) == (2, 1, 3)
    assert abs(hour["wait_seconds_max"] - 3600.0) < 0.01


def test_expired_buckets_are_pruned_and_old_attempts_never_counted(engine: sa.Engine) -> None:
    old = NOW - KEEP - timedelta(hours=1)
    with engine.begin() as conn:
        finished_job(conn, runnable=old, started=old, finished=old)
        finished_job(conn, runnable=MINUTE, started=MINUTE, finished=MINUTE)
    assert roll_up(engine, NOW).attempts == 1
    with engine.begin() as conn:
        assert prune(conn, NOW) == 0
        assert prune(conn, MINUTE + KEEP + timedelta(minutes=1)) == 1
        assert buckets(conn) == {}
        assert conn.execute(sa.select(history_hours)).all() == []


def test_the_watermark_passes_big_backlogs_in_chunks(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollup, "CHUNK", 2)
    with engine.begin() as conn:
        for second in range(5):
            moment = MINUTE + timedelta(seconds=second)
            finished_job(conn, runnable=moment, started=moment, finished=moment)
    assert roll_up(engine, NOW).attempts == 5
    with engine.connect() as conn:
        assert [b["processed"] for b in buckets(conn).values()] == [5]
