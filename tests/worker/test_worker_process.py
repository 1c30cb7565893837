"""`jobdesk worker` as a real process: runs jobs, shuts down gracefully, survives
crashes of its peers (F1, F3, F5, F8, D8) and elects one maintenance leader."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.leader import LEADER, current_lease
from jobdesk.shared.core.models import workers
from tests.worker.procs import (
    Worker,
    Workers,
    all_done,
    attempts_of,
    effect_rows,
    job,
    statuses,
    wait_for,
)

pytestmark = pytest.mark.slow


def add(engine: sa.Engine, job_type: str, payload: dict | None = None, **kw: object) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload or {}, **kw)  # type: ignore[arg-type]


def test_runs_jobs_and_stops_cleanly(engine: sa.Engine, procs: Workers) -> None:
    ids = [add(engine, "t.effect", {"key": f"k{i}"}) for i in range(20)]
    flaky = add(engine, "t.flaky", {"fail_times": 1})
    dead = add(engine, "t.permanent")
    worker = procs.start("--concurrency", "4")
    wait_for(lambda: all_done(engine, 22, ("succeeded", "dead")), 20)
    with engine.connect() as conn:
        rows = list(conn.execute(sa.select(workers.c.id, workers.c.concurrency)))
    assert [r.concurrency for r in rows] == [4]
    assert worker.stop() == 0
    assert all(job(engine, i).status == "succeeded" for i in ids)
    assert len(effect_rows(engine, "done:")) == 20
    assert [a.outcome for a in attempts_of(engine, flaky)] == ["failed", "succeeded"]
    assert [a.outcome for a in attempts_of(engine, dead)] == ["permanent"]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(workers)).scalar_one() == 0
    log = worker.log()
    assert "worker_stopped" in log
    assert "Traceback" not in log


def test_killed_worker_job_is_rescued_and_runs_again(engine: sa.Engine, procs: Workers) -> None:
    job_id = add(engine, "t.sleep", {"seconds": 60, "first_only": True})
    first = procs.start()
    wait_for(lambda: effect_rows(engine, f"run:{job_id}:1"), 10)
    first.signal(signal.SIGKILL)
    first.proc.wait(5)
    assert job(engine, job_id).status == "running"
    procs.start()
    wait_for(lambda: job(engine, job_id).status == "succeeded", 20)
    row = job(engine, job_id)
    assert row.attempts == 2
    outcomes = [(a.attempt, a.outcome) for a in attempts_of(engine, job_id)]
    assert outcomes == [(1, "lost"), (2, "succeeded")]
    assert "worker lost" in attempts_of(engine, job_id)[0].error


@pytest.mark.postgresql_only
def test_sigterm_finishes_short_jobs_and_releases_long_ones(
    engine: sa.Engine, procs: Workers
) -> None:
    short = [add(engine, "t.sleep", {"seconds": 0.5}) for _ in range(2)]
    long = [add(engine, "t.sleep", {"seconds": 30}) for _ in range(2)]
    waiting = add(engine, "t.effect", {"key": "after"}, run_at=None)
    worker = procs.start("--concurrency", "4", "--shutdown-timeout", "2")
    wait_for(lambda: len(effect_rows(engine, "run:")) == 4, 10)
    # Enqueued after the slots filled up, so it is still queued when SIGTERM arrives.
    late = add(engine, "t.effect", {"key": "late"})
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    assert time.monotonic() - started < 6
    for job_id in short:
        assert job(engine, job_id).status == "succeeded"
    for job_id in long:
        row = job(engine, job_id)
        assert (row.status, row.attempts, row.locked_by) == ("queued", 0, None)
        assert attempts_of(engine, job_id) == []
        assert not effect_rows(engine, f"end:{job_id}:")
    assert job(engine, waiting).status in ("succeeded", "queued")
    assert job(engine, late).status == "queued"
    assert statuses(engine).get("running", 0) == 0


@pytest.mark.postgresql_only
def test_a_claim_that_skipped_a_locked_job_looks_again_before_its_poll(
    engine: sa.Engine, procs: Workers
) -> None:
    """A claim passes over queued rows another transaction holds (SKIP LOCKED) and comes
    back short of its limit with the backlog not empty: the worker looks once more after
    its cooldown instead of waiting for its next poll (30 s here; no enqueue notifies)."""
    held, *free = [add(engine, "t.effect", {"key": f"k{i}"}) for i in range(3)]
    with engine.connect() as locker:
        locker.execute(
            sa.text("SELECT id FROM jobdesk_jobs WHERE id = :id FOR UPDATE"), {"id": held}
        )
        worker = procs.start(
            "--concurrency",
            "4",
            env={
                "JOBDESK_POLL_INTERVAL_SECONDS": "30",
                # Frozen right after its first claim (the two free jobs) committed.
                "JOBDESK_TEST_FAILPOINTS": "after_claim:stop:#1",
            },
            wait_ready=False,
        )
        wait_for(lambda: "failpoint after_claim fired" in worker.log(), 20)
        assert [job(engine, job_id).status for job_id in free] == ["running", "running"]
        locker.rollback()  # the held job is free now, and nobody was told
    resumed = time.monotonic()
    worker.signal(signal.SIGCONT)
    wait_for(lambda: job(engine, held).status == "succeeded", 10)
    assert time.monotonic() - resumed < 5, worker.log()
    wait_for(lambda: all(job(engine, job_id).status == "succeeded" for job_id in free), 10)


def test_a_busy_worker_hands_back_prefetched_jobs_it_cannot_start(
    engine: sa.Engine, procs: Workers
) -> None:
    busy = procs.start("--concurrency", "1")
    # A few handlers that return at once (no database): it prefetches from now on.
    warm = [add(engine, "t.flaky", {"fail_times": 0}) for _ in range(3)]
    wait_for(lambda: all_done(engine, len(warm)), 10)
    with engine.begin() as conn:
        slow = enqueue(conn, "t.sleep", {"seconds": 8})
        quick = [enqueue(conn, "t.effect", {"key": f"quick{i}"}) for i in range(5)]
    wait_for(lambda: effect_rows(engine, f"run:{slow}:"), 10)

    def handed_back() -> bool:
        rows = [job(engine, job_id) for job_id in quick]
        return all((r.status, r.attempts, r.locked_by) == ("queued", 0, None) for r in rows)

    # Its one slot is taken for 8 s: jobs it claimed to run next go back to the queue.
    wait_for(handed_back, 3)
    procs.start("--concurrency", "1")
    wait_for(lambda: all(job(engine, job_id).status == "succeeded" for job_id in quick), 10)
    assert job(engine, slow).status == "running"
    assert [job(engine, job_id).attempts for job_id in quick] == [1] * 5
    assert busy.alive()


def test_hanging_handler_times_out_and_frees_its_slot(engine: sa.Engine, procs: Workers) -> None:
    hung = add(engine, "t.hang", max_attempts=2)
    worker = procs.start("--concurrency", "1")
    wait_for(lambda: effect_rows(engine, f"run:{hung}:1"), 10)
    other = add(engine, "t.effect", {"key": "behind-the-hang"})
    wait_for(lambda: job(engine, other).status == "succeeded", 10)
    wait_for(lambda: job(engine, hung).status == "dead", 15)
    outcomes = [(a.attempt, a.outcome) for a in attempts_of(engine, hung)]
    assert outcomes == [(1, "timeout"), (2, "timeout")]
    assert "timeout" in job(engine, hung).last_error
    assert worker.alive()
    assert worker.stop() == 0


def test_too_many_stuck_threads_exit_nonzero_after_clean_stop(
    engine: sa.Engine, procs: Workers
) -> None:
    hung = add(engine, "t.hang")
    worker = procs.start("--concurrency", "1", env={"JOBDESK_MAX_STUCK_THREADS": "0"})
    assert worker.proc.wait(15) == 3
    row = job(engine, hung)
    assert row.status in ("failed", "dead")
    assert next(a.outcome for a in attempts_of(engine, hung)) == "timeout"
    assert "too_many_stuck_threads" in worker.log()


def test_unknown_type_is_not_claimed(engine: sa.Engine, procs: Workers) -> None:
    unknown = add(engine, "t.not_deployed_yet")
    known = add(engine, "t.effect")
    worker = procs.start()
    wait_for(lambda: job(engine, known).status == "succeeded", 10)
    time.sleep(0.3)  # a few more poll cycles
    row = job(engine, unknown)
    assert (row.status, row.attempts, row.locked_by) == ("queued", 0, None)
    assert attempts_of(engine, unknown) == []
    assert worker.stop() == 0


def test_uncommitted_job_is_not_run_until_commit(engine: sa.Engine, procs: Workers) -> None:
    worker = procs.start()
    with engine.connect() as conn:
        enqueue(conn, "t.effect", {"key": "rolled-back"})
        time.sleep(0.5)
        conn.rollback()
    with engine.connect() as conn:
        late = enqueue(conn, "t.effect", {"key": "late-commit"})
        time.sleep(0.5)
        conn.commit()
    with engine.connect() as conn:
        committed_at = db_now(conn)
    wait_for(lambda: job(engine, late).status == "succeeded", 10)
    assert job(engine, late).started_at >= committed_at - timedelta(seconds=0.2)
    assert [r.key for r in effect_rows(engine, "done:")] == ["done:late-commit"]
    assert worker.stop() == 0


def test_leader_election_and_takeover(engine: sa.Engine, procs: Workers) -> None:
    env = {"JOBDESK_LEADER_LEASE_SECONDS": "3"}
    a = procs.start(env=env)
    b = procs.start(env=env)
    ids = {a: worker_id(a), b: worker_id(b)}

    def holder() -> str | None:
        with engine.connect() as conn:
            lease = current_lease(conn, LEADER)
        return lease.holder if lease else None

    first = wait_for(holder, 10)
    assert first in ids.values()
    leader, follower = (a, b) if ids[a] == first else (b, a)
    # The log line follows the lease row by a moment (the worker writes it after commit).
    assert wait_for(lambda: "leader_elected" in leader.log(), 5)
    leader.signal(signal.SIGKILL)
    leader.proc.wait(5)
    assert wait_for(lambda: holder() == ids[follower], 15)
    assert wait_for(lambda: "leader_elected" in follower.log(), 5)
    assert follower.stop() == 0
    assert holder() is None  # released on clean shutdown, no waiting for expiry


def worker_id(worker: Worker) -> str:
    # The "worker <id> started" line: the maintenance thread may log "this worker is now
    # the maintenance leader" before it.
    found = re.search(r"worker (\S+) started", worker.log())
    assert found is not None, worker.log()
    return found.group(1)
