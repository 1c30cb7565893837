"""The leader's history task on jobs that went through the real claim and completion:
the wait is measured from `next_run_at` to the claim, a retried job's first attempt has
no wait, and a job spent on its last attempt counts as dead."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.core.transitions import complete, fail
from jobdesk.shared.history.models import history_minutes
from jobdesk.shared.history.rollup import SETTLE
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance.tasks import MaintenanceContext, default_tasks
from tests.factories import make_job


def test_the_task_rolls_up_what_workers_finished(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        make_job(conn, job_type="mail.send", queue="email", next_run_at=now - timedelta(seconds=8))
        make_job(conn, job_type="mail.send", queue="email", max_attempts=2, next_run_at=now)
    with engine.begin() as conn:
        first, second = claim(conn, worker_id="w1", limit=2, now=now + timedelta(seconds=2))
        assert complete(conn, first.ref, now=now + timedelta(seconds=3))
        assert fail(
            conn,
            second,
            error="boom",
            retry_at=now + timedelta(seconds=5),
            now=now + timedelta(seconds=3),
        )
    with engine.begin() as conn:
        [again] = claim(conn, worker_id="w1", limit=1, now=now + timedelta(seconds=6))
        assert fail(conn, again.ref, error="boom", retry_at=None, now=now + timedelta(seconds=7))

    task = next(t for t in default_tasks() if t.name == "history_rollup")
    context = MaintenanceContext(
        engine, Settings(), policy_for=lambda _: RetryPolicy(), heartbeat_seconds=1.0
    )
    assert task.run(context, now + SETTLE + timedelta(seconds=10)) == 3
    with engine.connect() as conn:
        rows = conn.execute(sa.select(history_minutes)).mappings().all()
    assert sum(r["processed"] for r in rows) == 1
    assert sum(r["failed"] for r in rows) == 2
    assert sum(r["dead"] for r in rows) == 1
    # The first job waited 10 s (due 8 s before `now`, claimed 2 s after); the retried
    # job's last attempt 1 s (due at +5 s, claimed at +6 s); its first attempt is not
    # measured (its runnable moment moved on with the retry).
    assert sum(r["waited"] for r in rows) == 2
    assert abs(sum(r["wait_seconds_sum"] for r in rows) - 11.0) < 0.01
    assert abs(max(r["wait_seconds_max"] or 0 for r in rows) - 10.0) < 0.01
