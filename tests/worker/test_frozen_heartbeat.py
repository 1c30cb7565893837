"""A worker frozen inside its heartbeat's transaction — its job rows locked — blocks
neither the rescue of its jobs nor an operator's cancel: the server ends the frozen
session within half a lease, the cancel is recorded at once without waiting on the lock,
and the reaper rescues the jobs (the cancelled one ends `cancelled`) about a lease later.

PostgreSQL only: on SQLite a process frozen inside a write transaction holds the
database's one write lock, and every writer waits for it (up to its busy timeout).
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import cancel_requests, jobs
from jobdesk.shared.operator.commands.cancellation import Cancelled, cancel_job
from tests.worker.procs import Workers, job, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgresql_only]

# The frozen session must still be there when the test looks (it lives half a lease after
# the freeze): 5 s leaves 2.5 s for a loaded CI host to see the failpoint's log line.
LEASE = 5.0
ENV = {
    "JOBDESK_LEASE_SECONDS": str(LEASE),
    "JOBDESK_HEARTBEAT_SECONDS": "1",
    "JOBDESK_REAPER_INTERVAL_SECONDS": "0.5",
    "JOBDESK_LEADER_LEASE_SECONDS": "1.5",
}


def _running_on(engine: sa.Engine, worker_prefix: str) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(jobs.c.id).where(
                    jobs.c.status == "running", jobs.c.locked_by.startswith(worker_prefix)
                )
            ).scalars()
        )


def _frozen_sessions(engine: sa.Engine) -> int:
    """Worker sessions idle in a transaction whose last statement renewed leases: the
    frozen heartbeat's. (The whole process stops: another of its threads caught inside
    a transaction of its own — a claim, a completion — is frozen there too.)"""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = 'jobdesk-worker' AND state = 'idle in transaction' "
                    "AND query LIKE '%UPDATE jobdesk_jobs SET lease_expires_at%'"
                )
            ).scalar_one()
        )


def test_a_worker_frozen_in_its_heartbeat_blocks_neither_rescue_nor_cancel(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(
            conn,
            [NewJob("t.sleep", {"seconds": 30, "first_only": True}) for _ in range(3)],
        )
    # Freezes itself (SIGSTOP) in its third heartbeat, inside the transaction, right after
    # renewing the leases of the three jobs it is running.
    frozen = procs.start(
        "--concurrency", "3", env={**ENV, "JOBDESK_TEST_FAILPOINTS": "in_renew:stop:#3"}
    )
    wait_for(lambda: "failpoint in_renew fired" in frozen.log(), 20)
    froze_at = time.monotonic()
    holder = job(engine, ids[0]).locked_by
    assert sorted(_running_on(engine, holder)) == sorted(ids)
    wait_for(lambda: _frozen_sessions(engine) == 1, 1)  # its job rows are locked now

    # The operator's cancel: recorded at once, not queued behind the frozen lock.
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL statement_timeout = '5s'"))
        outcome = cancel_job(conn, ids[0], actor="ops", reason="stuck", now=db_now(conn))
    assert outcome is Cancelled.STOPPING
    assert time.monotonic() - started < 2.0  # waiting on the lock: the 5 s timeout
    with engine.connect() as conn:
        parked = conn.execute(sa.select(cancel_requests)).one()
    assert (parked.job_id, parked.requested_by, parked.reason) == (ids[0], "ops", "stuck")

    # The server ends the frozen transaction within half a lease (polled: a busy host
    # may notice a little later).
    wait_for(lambda: _frozen_sessions(engine) == 0, 2 * LEASE)
    ended_after = time.monotonic() - froze_at

    # A healthy worker leads once the frozen one's leader lease ran out: its reaper
    # rescues the frozen worker's jobs (their lease ran out too) and carries out the
    # cancel — within a few leases of its start, where the server's default would have
    # kept the rows locked for ten minutes.
    healthy = procs.start("--concurrency", "3", env=ENV)
    ready_at = time.monotonic()
    wait_for(lambda: job(engine, ids[0]).status == "cancelled", 5 * LEASE)
    rescued_after = time.monotonic() - ready_at
    row = job(engine, ids[0])
    assert (row.cancelled_by, row.cancel_reason) == ("ops", "stuck")
    wait_for(lambda: all(job(engine, i).status == "succeeded" for i in ids[1:]), 20)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cancel_requests)).scalar() == 0
    assert ended_after < 2 * LEASE
    assert rescued_after < 5 * LEASE, f"rescued {rescued_after:.1f}s after a worker was ready"
    frozen.kill()
    assert healthy.stop() == 0
