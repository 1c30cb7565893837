"""A 300-child batch drained by two worker processes while one is SIGKILLed: every child
succeeds, each callback is released exactly once and after the last child, and the
callbacks' `ctx.batch` shows the batch and 300 succeeded (both databases). And `after=`
chains run in order across workers."""

from __future__ import annotations

import itertools
import re
import signal

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_batch
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.workflows.models import batches
from tests.worker.procs import Worker, Workers, statuses, wait_for

pytestmark = pytest.mark.slow

MODULE = "tests.worker.jobmods.batchy"
CHILDREN = 300


def succeeded(engine: sa.Engine) -> int:
    return statuses(engine).get("succeeded", 0)


def worker_id(worker: Worker) -> str:
    found = re.search(r"worker (\S+) started", worker.log())
    assert found is not None, worker.log()
    return found.group(1)


def holding(engine: sa.Engine, worker: str) -> bool:
    """The worker holds running children right now."""
    with engine.connect() as conn:
        held = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.status == "running", jobs.c.locked_by == worker)
        ).scalar_one()
    return held > 0


def test_a_batch_survives_a_killed_worker(engine: sa.Engine, procs: Workers) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(
            conn,
            # 0.2 s children: the second worker starts about a second after the first,
            # and with 50 ms ones a loaded machine saw the last children finish before
            # the doomed worker was found holding one.
            [NewJob("t.batch_child", {"n": n, "sleep": 0.2}) for n in range(CHILDREN)],
            on_success=NewJob("t.batch_callback", {"kind": "success"}),
            on_finish=NewJob("t.batch_callback", {"kind": "finish"}),
            name="killed worker",
        )
    # 4-s leases: the killed worker's jobs are rescued after that; a loaded machine
    # stalling a live worker for 2 s (the usual test lease) would rescue its jobs too.
    slow_lease = {"JOBDESK_LEASE_SECONDS": "4", "JOBDESK_HEARTBEAT_SECONDS": "0.8"}
    doomed = procs.start("--jobs", MODULE, "--concurrency", "8", env=slow_lease)
    procs.start("--jobs", MODULE, "--concurrency", "8", env=slow_lease)
    wait_for(lambda: succeeded(engine) >= 60, 60)
    # Killed while it holds children (a loaded machine may find it between claims).
    wait_for(lambda: holding(engine, worker_id(doomed)), 30, interval=0.01)
    doomed.signal(signal.SIGKILL)
    wait_for(lambda: succeeded(engine) >= CHILDREN + 2, 120, interval=0.2)
    procs.cleanup()

    assert statuses(engine) == {"succeeded": CHILDREN + 2}
    callbacks = [batch.on_success_job_id, batch.on_finish_job_id]
    with engine.connect() as conn:
        row = conn.execute(sa.select(batches).where(batches.c.id == batch.id)).one()
        last_child = conn.execute(
            sa.select(sa.func.max(jobs.c.finished_at)).where(jobs.c.batch_id == batch.id)
        ).scalar_one()
        ran = conn.execute(
            sa.select(jobs.c.id, jobs.c.started_at, jobs.c.result).where(jobs.c.id.in_(callbacks))
        ).all()
        history = conn.execute(
            sa.select(job_attempts.c.job_id, job_attempts.c.outcome).where(
                job_attempts.c.job_id.in_(callbacks)
            )
        ).all()
        rescued = conn.execute(
            sa.select(sa.func.count()).where(job_attempts.c.outcome == "lost")
        ).scalar_one()
    assert rescued > 0  # the killed worker held children: the reaper gave them back
    assert (row.total, row.finished, row.succeeded) == (CHILDREN, CHILDREN, CHILDREN)
    # Each released once, after the last child ended, and completed once: one success
    # each; any other attempt is the reaper rescuing a stalled one (the lease at work).
    outcomes = [outcome for _, outcome in history]
    assert sorted(job_id for job_id, outcome in history if outcome == "succeeded") == sorted(
        callbacks
    )
    assert set(outcomes) <= {"succeeded", "lost"}, history
    for _, started_at, result in ran:
        assert started_at >= last_child
        assert result["batch"] == batch.id
        assert result["counts"] == {"succeeded": CHILDREN}
        assert result["results"] == list(range(CHILDREN))


def test_a_chain_runs_in_order_across_workers(engine: sa.Engine, procs: Workers) -> None:
    with engine.begin() as conn:
        previous: list[int] = []
        chain = []
        for step in range(6):
            job_id = enqueue(conn, "t.chain_step", {"step": step}, after=previous or None)
            chain.append(job_id)
            previous = [job_id]
    procs.start("--jobs", MODULE, "--concurrency", "4")
    procs.start("--jobs", MODULE, "--concurrency", "4")
    wait_for(lambda: succeeded(engine) >= len(chain), 60, interval=0.1)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.started_at, jobs.c.finished_at)
            .where(jobs.c.id.in_(chain))
            .order_by(jobs.c.id)
        ).all()
    for before, after in itertools.pairwise(rows):
        assert after.started_at >= before.finished_at
