"""`cancel_job` when the job changes state under it: a cancel racing the reaper (which
turns a lost `running` job into a retrying one) cancels it, and the messages use the
product's words."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.errors import ConflictError
from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.shared.operator.cancellation import Cancelled, cancel_job
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
    """The cancel finds the job `running` and asks its worker to stop it; that write
    waits on the reaper's row lock and, once the reaper commits, no longer matches (the
    job is retrying now). Before, the cancel then said "job #N is failed; only queued,
    retrying or running jobs can be cancelled"."""
    with engine.begin() as conn:
        make_job(conn, next_run_at=NOW - timedelta(seconds=1), max_attempts=3)
        (job,) = claim(conn, worker_id="w1", limit=1, now=NOW, lease_seconds=30)
    reaper = engine.connect()
    operator = engine.connect()
    try:
        reaper.begin()
        assert [j for j, _ in rescue_expired(reaper, now=NOW + timedelta(seconds=31))] == [job.id]
        pid = operator.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        operator.rollback()
        outcome: dict[str, Any] = {}

        def cancel() -> None:
            try:
                with operator.begin():
                    outcome["done"] = cancel_job(
                        operator, job.id, actor="otto", reason="stop it", now=NOW
                    )
            except Exception as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=cancel)
        thread.start()
        deadline = time.monotonic() + 10
        while not _waiting_on_a_lock(engine, pid):
            assert time.monotonic() < deadline, f"never waited on the reaper's lock: {outcome}"
            time.sleep(0.02)
        reaper.commit()
        thread.join(10)
    finally:
        reaper.close()
        operator.close()
    assert outcome == {"done": Cancelled.NOW}
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
