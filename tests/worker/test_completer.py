"""`apply_outcomes`: how a batch of settled attempts is written — hand-backs (snoozed,
released unstarted) go out as one statement per kind, however many jobs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.worker.completer import apply_outcomes
from jobdesk.worker.executor import Kind, Outcome
from jobdesk.worker.registry import Registry


@contextmanager
def _jobs_updates(engine: sa.Engine) -> Iterator[list[str]]:
    """The UPDATEs of `jobdesk_jobs` sent while the block runs."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "UPDATE jobdesk_jobs" in statement:
            seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", listen)


def test_a_batch_of_hand_backs_is_one_statement_per_kind(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob("t.noop", {"n": n}) for n in range(60)])
    with engine.begin() as conn:
        claimed = claim(conn, worker_id="w1", limit=60)
        asked = claimed[0].id
        conn.execute(
            sa.update(jobs).where(jobs.c.id == asked).values(cancel_requested_at=db_now(conn))
        )
    released = [Outcome(job, Kind.RELEASED, error="slots are busy") for job in claimed[:50]]
    snoozed = [Outcome(job, Kind.SNOOZED, delay_seconds=600.0) for job in claimed[50:]]
    with _jobs_updates(engine) as updates, engine.begin() as conn:
        applied = apply_outcomes(
            conn, released + snoozed, now=db_now(conn), policy_for=Registry().policy_for
        )
    assert len(updates) == 2
    assert {a.outcome.job.id: a.status for a in applied} == {
        job_id: JobStatus.CANCELLED if job_id == asked else JobStatus.QUEUED for job_id in ids
    }
    assert {a.label for a in applied} == {"released", "snoozed", "cancelled"}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.next_run_at)
        ).all()
        recorded = conn.execute(sa.select(job_attempts.c.job_id, job_attempts.c.error)).all()
        now = db_now(conn)
    assert all(r.attempts == (1 if r.id == asked else 0) for r in rows)
    later = {r.id for r in rows if r.next_run_at > now}
    assert later == {job.id for job in claimed[50:]}
    assert recorded == [
        (asked, "Cancelled: the attempt was released at shutdown after the cancel request")
    ]
