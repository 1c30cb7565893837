"""Transitions: compare-and-set on (id, running, token), attempt rows, reaper, cancel."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.decisions import cancel
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.retry import ExponentialBackoff, RetryPolicy
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.core.transitions import (
    Completion,
    complete,
    complete_many,
    extend_lease,
    fail,
    rescue_expired,
    snooze,
)
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def claimed(engine: sa.Engine, count: int = 1, **fields: Any) -> list[ClaimedJob]:
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=at(-1), **fields)
        return claim(conn, worker_id="w1", limit=count, now=NOW, lease_seconds=30)


def attempts_of(engine: sa.Engine, job_id: int) -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(job_attempts)
                .where(job_attempts.c.job_id == job_id)
                .order_by(job_attempts.c.id)
            )
        )


def snapshot(engine: sa.Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(job_row(conn, job_id)._mapping)


def test_complete_records_success_and_releases_the_lease(engine: sa.Engine) -> None:
    (job,) = claimed(engine)
    with engine.begin() as conn:
        assert complete(conn, job.ref, now=at(2), result={"message_id": "<1@x>"})
    row = snapshot(engine, job.id)
    assert row["status"] == JobStatus.SUCCEEDED
    assert row["result"] == {"message_id": "<1@x>"}
    assert row["finished_at"] == at(2)
    assert (row["locked_by"], row["lease_token"], row["lease_expires_at"]) == (None, None, None)
    (attempt,) = attempts_of(engine, job.id)
    assert (attempt.attempt, attempt.outcome, attempt.worker_id) == (1, "succeeded", "w1")
    assert (attempt.started_at, attempt.finished_at, attempt.error) == (NOW, at(2), None)


def test_complete_many_skips_fenced_jobs(engine: sa.Engine) -> None:
    jobs_ = claimed(engine, 3)
    stale = dataclasses.replace(jobs_[1].ref, lease_token=jobs_[1].lease_token + 1)
    items = [Completion(jobs_[0].ref, {"n": 0}), Completion(stale), Completion(jobs_[2].ref)]
    with engine.begin() as conn:
        done = complete_many(conn, items, now=at(1))
    assert sorted(done) == sorted([jobs_[0].id, jobs_[2].id])
    assert snapshot(engine, jobs_[1].id)["status"] == JobStatus.RUNNING
    assert attempts_of(engine, jobs_[1].id) == []
    assert snapshot(engine, jobs_[0].id)["result"] == {"n": 0}
    assert len(attempts_of(engine, jobs_[2].id)) == 1


def test_a_stale_token_changes_nothing(engine: sa.Engine) -> None:
    (job,) = claimed(engine)
    stale = dataclasses.replace(job.ref, lease_token=job.lease_token ^ 1)
    before = snapshot(engine, job.id)
    with engine.begin() as conn:
        assert complete(conn, stale, now=at(1)) is False
        assert fail(conn, stale, error="x", retry_at=at(60), now=at(1)) is None
        assert fail(conn, stale, error="x", retry_at=None, now=at(1)) is None
        assert snooze(conn, stale, until=at(60), now=at(1)) is False
        assert extend_lease(conn, [stale], lease_seconds=300, now=at(1)) == []
    assert snapshot(engine, job.id) == before
    assert attempts_of(engine, job.id) == []


def test_a_job_taken_over_by_another_worker_is_fenced_from_the_first(engine: sa.Engine) -> None:
    (first,) = claimed(engine, max_attempts=3)
    with engine.begin() as conn:  # the first worker stalls; the reaper hands the job on
        assert rescue_expired(conn, now=at(31)) == [(first.id, JobStatus.FAILED)]
    with engine.begin() as conn:
        (second,) = claim(conn, worker_id="w2", limit=1, now=at(10_000))
    with engine.begin() as conn:
        assert complete(conn, first.ref, now=at(10_001)) is False
        assert complete(conn, second.ref, now=at(10_001)) is True
    row = snapshot(engine, first.id)
    assert (row["status"], row["attempts"]) == (JobStatus.SUCCEEDED, 2)


def test_fail_with_retry_at_schedules_the_next_attempt(engine: sa.Engine) -> None:
    (job,) = claimed(engine, max_attempts=3)
    with engine.begin() as conn:
        status = fail(conn, job.ref, error="ConnectionError: timed out", retry_at=at(90), now=at(1))
    assert status == JobStatus.FAILED
    row = snapshot(engine, job.id)
    assert (row["status"], row["next_run_at"], row["finished_at"]) == ("failed", at(90), None)
    assert row["last_error"] == "ConnectionError: timed out"
    assert row["error_fingerprint"]
    assert row["lease_token"] is None
    (attempt,) = attempts_of(engine, job.id)
    assert (attempt.outcome, attempt.error_fingerprint) == ("failed", row["error_fingerprint"])


def test_fail_without_retry_at_is_dead(engine: sa.Engine) -> None:
    (job,) = claimed(engine)
    with engine.begin() as conn:
        status = fail(
            conn,
            job.ref,
            error="400 Bad Request",
            retry_at=None,
            now=at(1),
            outcome=AttemptOutcome.PERMANENT,
        )
    assert status == JobStatus.DEAD
    row = snapshot(engine, job.id)
    assert (row["status"], row["finished_at"]) == ("dead", at(1))
    assert attempts_of(engine, job.id)[0].outcome == "permanent"


def test_fail_with_no_attempts_left_is_dead_even_with_a_retry_time(engine: sa.Engine) -> None:
    (job,) = claimed(engine, max_attempts=1)
    with engine.begin() as conn:
        assert fail(conn, job.ref, error="boom", retry_at=at(60), now=at(1)) == JobStatus.DEAD
    row = snapshot(engine, job.id)
    assert (row["status"], row["finished_at"]) == ("dead", at(1))


def test_attempt_errors_are_sanitised(engine: sa.Engine) -> None:
    (job,) = claimed(engine, max_attempts=5)
    error = (
        "POST https://api.example.com/v1?token=abc123secret failed\x00: "
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig card 4111 1111 1111 1111 "
        "bad \udcff byte " + "x" * 10_000
    )
    with engine.begin() as conn:
        fail(conn, job.ref, error=error, retry_at=at(60), now=at(1))
    (attempt,) = attempts_of(engine, job.id)
    stored = attempt.error
    assert stored == snapshot(engine, job.id)["last_error"]
    assert "\x00" not in stored
    assert "abc123secret" not in stored
    assert "eyJhbGciOiJIUzI1NiJ9" not in stored
    assert "4111 1111 1111 1111" not in stored
    assert "\udcff" not in stored
    assert "\ufffd" in stored or "?" in stored
    assert "truncated" in stored
    assert f"{len(error):,} characters" in stored  # the original length is noted
    assert len(stored) < 4200


def test_snooze_hands_the_job_back_without_counting_the_attempt(engine: sa.Engine) -> None:
    (job,) = claimed(engine)
    with engine.begin() as conn:
        assert snooze(conn, job.ref, until=at(120), now=at(1))
    row = snapshot(engine, job.id)
    assert (row["status"], row["attempts"], row["next_run_at"]) == ("queued", 0, at(120))
    assert row["lease_token"] is None
    assert attempts_of(engine, job.id) == []


def test_extend_lease_pushes_only_held_leases(engine: sa.Engine) -> None:
    one, two = claimed(engine, 2)
    stale = dataclasses.replace(two.ref, lease_token=two.lease_token + 1)
    with engine.begin() as conn:
        assert extend_lease(conn, [one.ref, stale], lease_seconds=60, now=at(20)) == [one.id]
    assert snapshot(engine, one.id)["lease_expires_at"] == at(80)
    assert snapshot(engine, two.id)["lease_expires_at"] == at(30)
    with engine.begin() as conn:
        assert extend_lease(conn, [], lease_seconds=60, now=at(20)) == []


def test_rescue_expired_returns_lost_jobs_to_retry_or_dead(engine: sa.Engine) -> None:
    retry, last = claimed(engine, 2, max_attempts=2)
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == last.id).values(attempts=2))
        (fresh,) = claim_with_long_lease(conn)
    policy = RetryPolicy(ExponentialBackoff(timedelta(seconds=10), timedelta(seconds=10)))
    with engine.begin() as conn:
        assert rescue_expired(conn, now=at(29)) == []
        rescued = dict(rescue_expired(conn, now=at(31), policy_for=lambda _type: policy))
    assert rescued == {retry.id: JobStatus.FAILED, last.id: JobStatus.DEAD}
    assert snapshot(engine, fresh)["status"] == "running"
    row = snapshot(engine, retry.id)
    assert row["next_run_at"] == at(41)
    assert "worker lost" in row["last_error"]
    assert "w1" in row["last_error"]
    assert attempts_of(engine, retry.id)[0].outcome == "lost"
    assert snapshot(engine, last.id)["status"] == "dead"


def claim_with_long_lease(conn: sa.Connection) -> list[int]:
    """A job claimed later, whose lease is still valid when the others expire."""
    make_job(conn, next_run_at=at(-1))
    return [job.id for job in claim(conn, worker_id="w9", limit=1, now=at(20), lease_seconds=600)]


def test_cancel_stops_queued_and_retrying_jobs_with_an_audit_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        queued = make_job(conn)
        retrying = make_job(conn, status="failed", attempts=1)
        running = make_job(conn, status="running", attempts=1)
        done = make_job(conn, status="succeeded", attempts=1)
        cancelled = cancel(
            conn,
            [queued, retrying, running, done, 10**9],
            actor="ana",
            reason="customer left",
            now=NOW,
        )
    assert sorted(cancelled) == sorted([queued, retrying])
    assert snapshot(engine, queued)["status"] == "cancelled"
    assert snapshot(engine, queued)["finished_at"] == NOW
    assert snapshot(engine, running)["status"] == "running"
    with engine.connect() as conn:
        audits = list(conn.execute(sa.select(audit_log).order_by(audit_log.c.job_id)))
    assert [(a.job_id, a.actor, a.action, a.reason) for a in audits] == [
        (queued, "ana", "cancel", "customer left"),
        (retrying, "ana", "cancel", "customer left"),
    ]
    with engine.begin() as conn:
        assert cancel(conn, [], actor="ana", reason="x", now=NOW) == []
        assert cancel(conn, [queued], actor="ana", reason="again", now=NOW) == []


@pytest.mark.postgresql_only
def test_a_completion_finds_its_jobs_by_key_however_many_others_run(db_url: str) -> None:
    # 2,000 jobs held by other workers, statistics that know it: a batch of 10 is still
    # ten primary-key lookups, never a read of every running row (which, once per
    # batch, grows with the fleet) nor of the whole key.
    from jobdesk import NewJob, enqueue_many
    from jobdesk.shared.core.db import make_engine
    from jobdesk.shared.core.driver.postgresql_jobs import COMPLETE_JOBS
    from jobdesk.shared.settings import Settings

    engine = make_engine(db_url, settings=Settings(), index_plans=True)
    try:
        with engine.begin() as conn:
            enqueue_many(conn, [NewJob("t.noop", {"i": i}) for i in range(2010)])
            claim(conn, worker_id="others", limit=2000)
            mine = claim(conn, worker_id="w1", limit=10)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sa.text("ANALYZE jobdesk_jobs"))
        rows = ",".join(f'[{j.id},{j.lease_token},"w1",null]' for j in mine)
        params = {"rows": f"[{rows}]", "now": datetime.now(UTC)}
        with engine.begin() as conn:
            plan = "\n".join(
                conn.execute(sa.text("EXPLAIN (ANALYZE) " + COMPLETE_JOBS.text), params).scalars()
            )
            conn.rollback()
    finally:
        engine.dispose()
    assert "Index Scan using pk_jobdesk_jobs on jobdesk_jobs" in plan, plan
    assert "Index Cond: (id = ANY" in plan, plan
    assert "ix_jobdesk_jobs_running_lease" not in plan, plan


def test_a_running_row_without_a_lease_is_rescued_at_once(engine: sa.Engine) -> None:
    """Written `running` by plain SQL with no lease: no worker holds it and none would
    ever finish it; before, the reaper (which only compared lease expiries) left it
    `running` forever."""
    with engine.begin() as conn:
        bare = int(
            conn.execute(
                sa.text(
                    "INSERT INTO jobdesk_jobs (job_type, payload, status) "
                    "VALUES ('test.noop', '{}', 'running') RETURNING id"
                )
            ).scalar_one()
        )
        ghost = make_job(
            conn, status="running", attempts=1, max_attempts=1, locked_by="ghost", started_at=at(-5)
        )
        (leased,) = claim_with_long_lease(conn)
    with engine.begin() as conn:
        rescued = dict(rescue_expired(conn, now=NOW))
    assert rescued == {bare: JobStatus.FAILED, ghost: JobStatus.DEAD}
    assert snapshot(engine, leased)["status"] == "running"
    row = snapshot(engine, bare)
    assert row["last_error"].startswith("no lease: the job was running without a lease, so ")
    assert row["lease_token"] is None
    assert "locked by ghost" in snapshot(engine, ghost)["last_error"]
    (attempt,) = attempts_of(engine, ghost)
    assert attempt.outcome == "lost"
    with engine.begin() as conn:  # the rescued job runs again, like any retrying job
        (again,) = claim(conn, worker_id="w2", limit=1, now=at(10_000))
        assert again.id == bare
        assert complete(conn, again.ref, now=at(10_001)) is True
