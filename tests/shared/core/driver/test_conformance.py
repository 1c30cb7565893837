"""The drivers' conformance suite: each core verb, called on the driver itself, does the
same on PostgreSQL and SQLite (every test runs on both).

The verbs are also exercised through the functions that use them (`tests/shared/core`);
here each one's contract is checked at the seam, so a new driver (or a change to one
dialect's SQL) answers to the same tests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import (
    ClaimFilter,
    Completion,
    Driver,
    Failure,
    HandBack,
    JobRow,
)
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.notifications import listen_connection, wait_for_queues
from jobdesk.shared.core.states import JobStatus
from tests.factories import job_row, make_job

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Ref:
    """An attempt as the driver sees one (the `AttemptRef` fields)."""

    def __init__(self, job_id: int, token: int | None, attempt: int = 1) -> None:
        self.id = job_id
        self.lease_token = token
        self.attempt = attempt
        self.worker_id = "w1"
        self.started_at: datetime | None = NOW


def row(job_type: str = "t.noop", *, key: str | None = None, priority: int = 5) -> JobRow:
    return JobRow(job_type, "default", '{"n": 1}', priority, 3, NOW, key, None, None)


def claim(conn: sa.Connection, d: Driver, *, limit: int = 10, token: int = 7) -> list[int]:
    batch = d.claim_jobs(
        conn,
        worker_id="w1",
        token=token,
        limit=limit,
        which=ClaimFilter(None, None),
        lease_seconds=30,
        now=NOW,
    )
    return [r[0] for r in batch.rows]


def attempts(conn: sa.Connection, job_id: int) -> list[tuple[int, str]]:
    rows = conn.execute(
        sa.select(job_attempts.c.attempt, job_attempts.c.outcome)
        .where(job_attempts.c.job_id == job_id)
        .order_by(job_attempts.c.id)
    )
    return [(r.attempt, r.outcome) for r in rows]


def test_insert_keeps_input_order_and_leaves_a_taken_key_out(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        d = driver(conn)
        first = d.insert_jobs(conn, [row(), row(key="k1"), row()])
        again = d.insert_jobs(conn, [row(key="k1"), row()])
    assert first.unkeyed == sorted(first.unkeyed)
    assert len(first.unkeyed) == 2
    assert list(first.by_key) == ["k1"]
    assert again.by_key == {}
    assert len(again.unkeyed) == 1


def test_claim_takes_due_jobs_in_priority_order_under_a_lease(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        low = make_job(conn, priority=7, next_run_at=NOW - timedelta(seconds=5))
        high = make_job(conn, priority=1, next_run_at=NOW - timedelta(seconds=1))
        make_job(conn, next_run_at=NOW + timedelta(hours=1))  # not due
        d = driver(conn)
        batch = d.claim_jobs(
            conn,
            worker_id="w1",
            token=99,
            limit=10,
            which=ClaimFilter(["default"], ["test.noop"]),
            lease_seconds=30,
            now=NOW,
        )
    assert [r[0] for r in batch.rows] == [high, low]
    assert batch.expires - batch.now == timedelta(seconds=30)
    with engine.connect() as conn:
        claimed = job_row(conn, high)
    assert (claimed.status, claimed.attempts, claimed.lease_token) == ("running", 1, 99)


def test_complete_is_fenced_by_the_lease_token(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a, b = make_job(conn, next_run_at=NOW), make_job(conn, next_run_at=NOW)
        d = driver(conn)
        claim(conn, d)
        done = d.complete_jobs(
            conn, [Completion(Ref(a, 7), {"ok": True}), Completion(Ref(b, 8))], now=NOW
        )
    assert done == [a]
    with engine.connect() as conn:
        assert (job_row(conn, a).status, job_row(conn, a).result) == ("succeeded", {"ok": True})
        assert job_row(conn, b).status == "running"
        assert attempts(conn, a) == [(1, "succeeded")]


def test_fail_retries_buries_and_honours_a_cancel_request(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        retry, dead, stop, lost = (make_job(conn, next_run_at=NOW) for _ in range(4))
        d = driver(conn)
        claim(conn, d)
        conn.execute(sa.update(jobs).where(jobs.c.id == stop).values(cancel_requested_at=NOW))
        later = NOW + timedelta(minutes=1)
        written = d.fail_jobs(
            conn,
            [
                Failure(Ref(retry, 7), "E: one", "f1", later, "failed"),
                Failure(Ref(dead, 7), "E: two", "f2", None, "permanent"),
                Failure(Ref(stop, 7), "E: three", "f3", later, "failed"),
                Failure(Ref(lost, 8), "E: fenced", None, later, "failed"),
            ],
            now=NOW,
        )
    assert written == {retry: JobStatus.FAILED, dead: JobStatus.DEAD, stop: JobStatus.CANCELLED}
    with engine.connect() as conn:
        assert job_row(conn, retry).next_run_at == later
        assert job_row(conn, retry).lease_token is None
        assert job_row(conn, dead).finished_at == NOW
        assert attempts(conn, retry) == [(1, "failed")]
        assert attempts(conn, dead) == [(1, "permanent")]
        assert attempts(conn, stop) == [(1, "cancelled")]
        assert (job_row(conn, lost).status, attempts(conn, lost)) == ("running", [])


def test_renew_pushes_held_leases_and_reports_cancel_requests(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a, b = make_job(conn, next_run_at=NOW), make_job(conn, next_run_at=NOW)
        d = driver(conn)
        claim(conn, d)
        conn.execute(sa.update(jobs).where(jobs.c.id == b).values(cancel_requested_at=NOW))
        later = NOW + timedelta(minutes=5)
        renewal = d.renew_leases(conn, [Ref(a, 7), Ref(b, 7), Ref(a, 8)], expires=later, now=NOW)
    assert sorted(renewal.renewed) == [a, b]
    assert renewal.busy == []
    assert renewal.stopping == (b,)


def test_hand_back_returns_the_attempt_and_stop_needs_a_request(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        back, stopped = make_job(conn, next_run_at=NOW), make_job(conn, next_run_at=NOW)
        d = driver(conn)
        claim(conn, d)
        until = NOW + timedelta(seconds=30)
        assert d.hand_back_jobs(conn, [HandBack(Ref(back, 7), until)], now=NOW) == {
            back: JobStatus.QUEUED
        }
        assert not d.stop_cancelled(conn, Ref(stopped, 7), now=NOW)
        conn.execute(sa.update(jobs).where(jobs.c.id == stopped).values(cancel_requested_at=NOW))
        assert d.stop_cancelled(conn, Ref(stopped, 7), now=NOW)
        assert d.record_progress(conn, Ref(stopped, 7), {"done": 1}) is False
    with engine.connect() as conn:
        assert (job_row(conn, back).status, job_row(conn, back).attempts) == ("queued", 0)
        assert job_row(conn, stopped).status == "cancelled"


def test_hand_back_writes_a_batch_in_one_call_each_job_its_own_time(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        soon, later, asked, lost = (make_job(conn, next_run_at=NOW) for _ in range(4))
        d = driver(conn)
        claim(conn, d)
        conn.execute(sa.update(jobs).where(jobs.c.id == asked).values(cancel_requested_at=NOW))
        at = [NOW + timedelta(seconds=s) for s in (5, 60, 9)]
        written = d.hand_back_jobs(
            conn,
            [
                HandBack(Ref(soon, 7), at[0]),
                HandBack(Ref(later, 7), at[1]),
                HandBack(Ref(asked, 7), at[2]),
                HandBack(Ref(lost, 8), at[2]),
            ],
            now=NOW,
        )
    assert written == {
        soon: JobStatus.QUEUED,
        later: JobStatus.QUEUED,
        asked: JobStatus.CANCELLED,
    }
    with engine.connect() as conn:
        for job_id, due in ((soon, at[0]), (later, at[1])):
            job = job_row(conn, job_id)
            assert (job.status, job.attempts, job.next_run_at) == ("queued", 0, due)
            assert (job.lease_token, job.locked_by, job.finished_at) == (None, None, None)
        stopped = job_row(conn, asked)
        assert (stopped.attempts, stopped.finished_at, stopped.lease_token) == (1, NOW, None)
        kept = job_row(conn, lost)
        assert (kept.status, kept.attempts, kept.lease_token) == ("running", 1, 7)


@pytest.mark.postgresql_only
def test_a_hand_back_due_now_wakes_the_workers_of_its_queue(engine: sa.Engine) -> None:
    """As an enqueue does: jobs a busy worker gives up are for another process to start
    now. A job handed back to a later time wakes nobody."""
    listener = listen_connection(engine.url)
    try:
        with engine.begin() as conn:
            now_job = make_job(conn, queue="mail", next_run_at=NOW)
            later_job = make_job(conn, queue="crm", next_run_at=NOW)
            d = driver(conn)
            claim(conn, d)
            d.hand_back_jobs(
                conn,
                [
                    HandBack(Ref(now_job, 7), NOW),
                    HandBack(Ref(later_job, 7), NOW + timedelta(seconds=30)),
                ],
                now=NOW,
            )
        woken = wait_for_queues(listener, 5.0)
        woken += wait_for_queues(listener, 0.2)
    finally:
        listener.close()
    assert woken == ["mail"]


def test_operator_verbs_resolve_copy_cancel_and_prune(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead = make_job(conn, status="dead", attempts=3, max_attempts=3, finished_at=NOW)
        queued = make_job(conn)
        d = driver(conn)
        assert d.resolve_dead(
            conn, [dead, queued], "requeued", actor="ana", reason="r", now=NOW
        ) == [dead]
        copies = d.copy_as_new(conn, [dead], ["job_type", "queue", "payload"], now=NOW)
        assert list(copies) == [dead]
        assert d.cancel_jobs(conn, [queued], actor="ana", reason="x", asked_at=NOW, now=NOW) == [
            queued
        ]
        old = make_job(conn, status="succeeded", finished_at=NOW - timedelta(days=30))
        still = jobs.c.status == "succeeded"
        assert d.prune_jobs(conn, [old, queued], still) == 1
    with engine.connect() as conn:
        new = job_row(conn, copies[dead])
        assert (new.status, new.retried_from_id, new.attempts) == ("queued", dead, 0)
        assert job_row(conn, queued).status == "cancelled"
        assert conn.execute(sa.select(jobs.c.id).where(jobs.c.id == old)).first() is None


def test_rate_limit_buckets_start_full_and_refill(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        d = driver(conn)
        kwargs = {"capacity": 2.0, "refill_per_second": 1.0}
        assert d.take_tokens(conn, "k", 5, now=NOW, **kwargs)[0] == 2
        taken, level = d.take_tokens(conn, "k", 1, now=NOW, **kwargs)
        assert (taken, level) == (0, 0.0)
        assert d.take_tokens(conn, "k", 1, now=NOW + timedelta(seconds=1), **kwargs)[0] == 1
