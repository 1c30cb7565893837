"""Cancelling a running job at the core: the request on the row, the heartbeat that reads
it, and every way the attempt can end afterwards — each fenced by the lease token."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.decisions import cancel, request_cancel
from jobdesk.shared.core.leases import renew_leases
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.core.transitions import (
    complete,
    fail,
    hand_back,
    rescue_expired,
    stop_cancelled,
)
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def running(engine: sa.Engine, count: int = 1) -> list[ClaimedJob]:
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=at(-1))
        return claim(conn, worker_id="w1", limit=count, now=NOW, lease_seconds=30)


def ask(
    engine: sa.Engine, *ids: int, actor: str = "sam", reason: str = "wrong report"
) -> list[int]:
    with engine.begin() as conn:
        return request_cancel(conn, list(ids), actor=actor, reason=reason, now=at(1))


def row(engine: sa.Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(job_row(conn, job_id)._mapping)


def attempts(engine: sa.Engine, job_id: int) -> list[tuple[str, str | None]]:
    with engine.connect() as conn:
        return [
            (r.outcome, r.error)
            for r in conn.execute(sa.select(job_attempts).where(job_attempts.c.job_id == job_id))
        ]


def cancel_audits(engine: sa.Engine, job_id: int) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(audit_log).where(
                    audit_log.c.job_id == job_id, audit_log.c.action == "cancel"
                )
            )
        )


def test_a_request_keeps_the_job_running_with_who_and_why_and_one_audit_row(
    engine: sa.Engine,
) -> None:
    (job,) = running(engine)
    assert ask(engine, job.id) == [job.id]
    assert ask(engine, job.id, actor="kim", reason="again") == []  # the first request stays
    found = row(engine, job.id)
    assert found["status"] == JobStatus.RUNNING
    assert (found["cancelled_by"], found["cancel_reason"]) == ("sam", "wrong report")
    assert found["cancel_requested_at"] == at(1)
    (entry,) = cancel_audits(engine, job.id)
    assert (entry.actor, entry.reason, entry.details) == (
        "sam",
        "wrong report",
        {"while_running": True},
    )


def test_only_running_jobs_are_asked_and_queued_ones_keep_who_and_why(engine: sa.Engine) -> None:
    (job,) = running(engine)
    with engine.begin() as conn:
        queued = make_job(conn)
        assert request_cancel(conn, [queued], actor="sam", reason="x", now=at(1)) == []
        assert cancel(conn, [queued, job.id], actor="sam", reason="dupe", now=at(2)) == [queued]
    found = row(engine, queued)
    assert found["status"] == JobStatus.CANCELLED
    assert (found["cancelled_by"], found["cancel_reason"], found["cancel_requested_at"]) == (
        "sam",
        "dupe",
        at(2),
    )
    assert row(engine, job.id)["status"] == JobStatus.RUNNING


def test_the_heartbeat_renewal_names_the_jobs_to_stop(engine: sa.Engine) -> None:
    first, second = running(engine, 2)
    ask(engine, second.id)
    with engine.begin() as conn:
        renewal = renew_leases(conn, [first.ref, second.ref], lease_seconds=30, now=at(2))
    assert sorted(renewal.renewed) == sorted([first.id, second.id])
    assert renewal.stopping == (second.id,)


def test_stopping_on_request_ends_cancelled_and_is_fenced(engine: sa.Engine) -> None:
    (job,) = running(engine)
    ask(engine, job.id)
    stale = dataclasses.replace(job.ref, lease_token=job.lease_token + 1)
    with engine.begin() as conn:
        assert not stop_cancelled(conn, stale, error="Cancelled: stale", now=at(2))
        assert stop_cancelled(conn, job.ref, error="Cancelled: stopped", now=at(3))
    found = row(engine, job.id)
    assert (found["status"], found["finished_at"], found["lease_token"]) == (
        JobStatus.CANCELLED,
        at(3),
        None,
    )
    assert attempts(engine, job.id) == [(AttemptOutcome.CANCELLED, "Cancelled: stopped")]
    with engine.begin() as conn:  # the stale attempt's later writes change nothing
        assert not complete(conn, job.ref, now=at(4))
        assert fail(conn, job.ref, error="late", retry_at=at(60), now=at(4)) is None


def test_stop_cancelled_needs_a_request(engine: sa.Engine) -> None:
    (job,) = running(engine)
    with engine.begin() as conn:
        assert not stop_cancelled(conn, job.ref, error="Cancelled", now=at(2))
    assert row(engine, job.id)["status"] == JobStatus.RUNNING


def test_a_failure_after_the_request_is_not_retried(engine: sa.Engine) -> None:
    (job,) = running(engine)
    ask(engine, job.id)
    with engine.begin() as conn:
        status = fail(conn, job.ref, error="ConnectionError: down", retry_at=at(60), now=at(2))
    assert status is JobStatus.CANCELLED
    assert row(engine, job.id)["finished_at"] == at(2)
    assert attempts(engine, job.id) == [(AttemptOutcome.CANCELLED, "ConnectionError: down")]


def test_a_snooze_or_release_after_the_request_ends_cancelled(engine: sa.Engine) -> None:
    (job,) = running(engine)
    ask(engine, job.id)
    with engine.begin() as conn:
        status = hand_back(conn, job.ref, until=at(60), now=at(2), reason="released at shutdown")
    assert status is JobStatus.CANCELLED
    found = row(engine, job.id)
    assert (found["attempts"], found["locked_by"]) == (1, None)
    (outcome,) = attempts(engine, job.id)
    assert outcome[0] == AttemptOutcome.CANCELLED
    assert "released at shutdown after the cancel request" in (outcome[1] or "")


def test_a_success_after_the_request_stays_a_success(engine: sa.Engine) -> None:
    (job,) = running(engine)
    ask(engine, job.id)
    with engine.begin() as conn:
        assert complete(conn, job.ref, now=at(2), result={"rows": 3})
    found = row(engine, job.id)
    assert found["status"] == JobStatus.SUCCEEDED
    assert found["cancelled_by"] == "sam"  # the request stays on record


def test_the_reaper_ends_a_lost_job_with_a_request_cancelled(engine: sa.Engine) -> None:
    asked, other = running(engine, 2)
    ask(engine, asked.id)
    with engine.begin() as conn:
        rescued = dict(rescue_expired(conn, now=at(120)))
    assert rescued == {asked.id: JobStatus.CANCELLED, other.id: JobStatus.FAILED}
    ((outcome, error),) = attempts(engine, asked.id)
    assert outcome == AttemptOutcome.CANCELLED
    assert "worker lost" in (error or "")
    with engine.begin() as conn:  # the lost worker, back from a pause, changes nothing
        assert not stop_cancelled(conn, asked.ref, error="Cancelled: late", now=at(121))
        assert not complete(conn, asked.ref, now=at(121))
    assert row(engine, asked.id)["status"] == JobStatus.CANCELLED
    with engine.connect() as conn:
        count = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.status == JobStatus.CANCELLED.value)
        ).scalar_one()
    assert count == 1
