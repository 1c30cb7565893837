"""A cancel request never waits on a running job's row lock: a row another transaction
holds (a worker frozen inside its heartbeat) gets its request parked at once, and the
reaper's pass moves it onto the job — or cancels a job that went back to the queue.
The worker's own transactions are bounded so a frozen one frees its rows."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.db import bound_transaction, make_engine
from jobdesk.shared.core.decisions import apply_cancel_requests, request_cancel
from jobdesk.shared.core.errors import ConflictError
from jobdesk.shared.core.leases import renew_leases, transaction_bound
from jobdesk.shared.core.models import cancel_requests, jobs
from jobdesk.shared.core.transitions import fail, rescue_expired
from jobdesk.shared.operator.commands.cancellation import Cancelled, cancel_job
from jobdesk.shared.settings import Settings
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def running(engine: sa.Engine, count: int = 1) -> list[ClaimedJob]:
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=at(-1))
        return claim(conn, worker_id="w1", limit=count, now=NOW, lease_seconds=30)


def parked(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(cancel_requests.c.job_id)).scalars())


def status(engine: sa.Engine, job_id: int) -> str:
    with engine.connect() as conn:
        return str(job_row(conn, job_id).status)


class HeartbeatHolding:
    """A heartbeat's renewal left uncommitted: the job rows stay locked until `release`."""

    def __init__(self, engine: sa.Engine, jobs_held: list[ClaimedJob]) -> None:
        self.conn = engine.connect()
        self.trans = self.conn.begin()
        renew_leases(self.conn, [j.ref for j in jobs_held], lease_seconds=30, now=at(0.5))

    def release(self) -> None:
        self.trans.commit()
        self.conn.close()


@pytest.mark.postgresql_only
def test_a_locked_row_gets_its_request_parked_without_waiting(engine: sa.Engine) -> None:
    held, free = running(engine, 2)
    heartbeat = HeartbeatHolding(engine, [held])
    try:
        started = time.monotonic()
        with engine.begin() as conn:
            conn.execute(sa.text("SET LOCAL lock_timeout = '3s'"))
            asked = request_cancel(conn, [held.id, free.id], actor="sam", reason="wrong", now=at(1))
        assert time.monotonic() - started < 1.0
        assert asked == sorted([held.id, free.id])
        assert parked(engine) == [held.id]
        assert status(engine, held.id) == "running"
        with engine.connect() as conn:
            assert job_row(conn, held.id).cancel_requested_at is None  # not on the row yet
            assert job_row(conn, free.id).cancelled_by == "sam"
            # Asked again while parked: the first request stands, and says so.
            with pytest.raises(ConflictError, match=r"already has a cancel request by sam"):
                cancel_job(conn, held.id, actor="kim", reason="again", now=at(2))
        # Still locked: the reaper's pass keeps the request for later.
        with engine.begin() as conn:
            assert apply_cancel_requests(conn, now=at(2)) == []
        assert parked(engine) == [held.id]
    finally:
        heartbeat.release()
    with engine.begin() as conn:
        assert apply_cancel_requests(conn, now=at(3)) == [held.id]
    assert parked(engine) == []
    with engine.connect() as conn:
        row = job_row(conn, held.id)
    assert (row.status, row.cancelled_by, row.cancel_reason) == ("running", "sam", "wrong")
    assert row.cancel_requested_at == at(1)
    # The frozen worker never comes back: the rescue honours the request.
    with engine.begin() as conn:
        rescued = rescue_expired(conn, now=at(60))
    assert dict(rescued)[held.id].value == "cancelled"


def test_parked_requests_follow_their_job_wherever_it_went(engine: sa.Engine) -> None:
    """Applied by the reaper to whatever the job became meanwhile (written directly here:
    SQLite never parks, having no row locks, but the pass works the same on both)."""
    still_running, requeued, finished = running(engine, 3)
    with engine.begin() as conn:
        fail(conn, requeued.ref, error="boom", retry_at=at(30), now=at(1))
        fail(conn, finished.ref, error="boom", retry_at=None, now=at(1))
        conn.execute(
            sa.insert(cancel_requests),
            [
                {"job_id": job_id, "requested_at": at(1), "requested_by": "sam", "reason": "r"}
                for job_id in (still_running.id, requeued.id, finished.id, 999_999)
            ],
        )
    with engine.begin() as conn:
        changed = apply_cancel_requests(conn, now=at(2))
    assert sorted(changed) == sorted([still_running.id, requeued.id])
    assert parked(engine) == []
    assert status(engine, still_running.id) == "running"
    assert status(engine, requeued.id) == "cancelled"
    assert status(engine, finished.id) == "dead"
    with engine.connect() as conn:
        assert job_row(conn, still_running.id).cancel_requested_at == at(1)
        assert job_row(conn, requeued.id).cancelled_by == "sam"


def test_an_unlocked_running_job_gets_its_request_on_the_row(engine: sa.Engine) -> None:
    (job,) = running(engine)
    with engine.begin() as conn:
        assert cancel_job(conn, job.id, actor="sam", reason="r", now=at(1)) is Cancelled.STOPPING
    assert parked(engine) == []
    with engine.connect() as conn:
        assert job_row(conn, job.id).cancel_requested_at == at(1)


def test_the_worker_transaction_bound_is_half_a_lease() -> None:
    assert transaction_bound(30) == 15
    assert transaction_bound(3) == 1.5
    assert transaction_bound(1) == 1.0


@pytest.mark.slow
@pytest.mark.postgresql_only
def test_the_server_ends_a_worker_transaction_left_idle_past_its_bound(db_url: str) -> None:
    """Both ways: an engine made with the bound (`jobdesk worker`'s own), and the
    per-transaction bound the heartbeat sets whatever its engine. The session it ends
    is a lost connection to the caller (retried like an outage), not a bug."""
    bounded = make_engine(db_url, settings=Settings(), idle_in_transaction_seconds=0.5)
    plain = make_engine(db_url, settings=Settings())
    try:
        for engine, bound in ((bounded, None), (plain, 0.5)):
            with engine.connect() as conn:
                conn.begin()
                if bound is not None:
                    bound_transaction(conn, bound)
                conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar()
                time.sleep(1.5)  # a frozen worker
                with pytest.raises(sa.exc.OperationalError, match="idle-in-transaction") as ended:
                    conn.execute(sa.text("SELECT 1")).scalar()
                assert ended.value.connection_invalidated
            with engine.connect() as conn:  # the pool hands out a live connection again
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    finally:
        bounded.dispose()
        plain.dispose()


def _update_waiting_for(engine: sa.Engine, job_id: int, bound: float) -> None:
    with engine.begin() as conn:
        bound_transaction(conn, bound)
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(priority=1))


@pytest.mark.postgresql_only
def test_the_bound_also_caps_how_long_a_heartbeat_waits_for_a_lock(db_url: str) -> None:
    engine = make_engine(db_url, settings=Settings())
    try:
        with engine.begin() as conn:
            job_id = make_job(conn)
        with engine.connect() as holder:
            holder.execute(
                sa.text("SELECT id FROM jobdesk_jobs WHERE id = :id FOR UPDATE"), {"id": job_id}
            )
            started = time.monotonic()
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                _update_waiting_for(engine, job_id, 0.3)
            assert time.monotonic() - started < 2
            holder.rollback()
    finally:
        engine.dispose()
