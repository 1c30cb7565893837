"""`cancel_job` when the job changes state under it: a cancel racing the reaper (which
turns a lost `running` job into a retrying one) cancels it, and the messages use the
product's words."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.decisions import apply_cancel_requests
from jobdesk.shared.core.errors import ConflictError
from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.shared.operator.commands.cancellation import Cancelled, cancel_job
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def _waiting_on_a_lock(engine: sa.Engine, pid: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid},
            ).scalar()
        )


@pytest.mark.postgresql_only
def test_a_cancel_racing_the_reaper_cancels_the_job_it_made_retrying(engine: sa.Engine) -> None:
    """The cancel finds the job `running` while the reaper holds its row (making it
    retrying). Before, the cancel's write waited for the reaper and then said "job #N is
    failed; only queued, retrying or running jobs can be cancelled". A cancel never waits
    on a locked row now: the request is parked at once, and the reaper's next pass
    cancels the job it made retrying, as the operator asked."""
    with engine.begin() as conn:
        make_job(conn, next_run_at=NOW - timedelta(seconds=1), max_attempts=3)
        (job,) = claim(conn, worker_id="w1", limit=1, now=NOW, lease_seconds=30)
    reaper = engine.connect()
    try:
        reaper.begin()
        assert [j for j, _ in rescue_expired(reaper, now=NOW + timedelta(seconds=31))] == [job.id]
        started = time.monotonic()
        with engine.begin() as conn:
            outcome = cancel_job(conn, job.id, actor="otto", reason="stop it", now=NOW)
        assert time.monotonic() - started < 5, "the cancel waited on the reaper's lock"
        reaper.commit()
    finally:
        reaper.close()
    assert outcome is Cancelled.STOPPING
    with engine.begin() as conn:
        assert apply_cancel_requests(conn, now=NOW + timedelta(seconds=32)) == [job.id]
    with engine.connect() as conn:
        row = job_row(conn, job.id)
    assert (row.status, row.cancelled_by) == ("cancelled", "otto")


def test_a_job_that_cannot_be_cancelled_is_named_in_the_products_words(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        dead = make_job(conn, status="dead", attempts=1, max_attempts=1)
    with engine.begin() as conn, pytest.raises(ConflictError) as raised:
        cancel_job(conn, dead, actor="otto", reason="stop it", now=NOW)
    assert str(raised.value) == (
        f"job #{dead} is dead; only queued, retrying or running jobs can be cancelled"
    )
