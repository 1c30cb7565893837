"""Cancelling a running job, against real `jobdesk worker` processes: a cooperative
handler stops on `ctx.cancelled`, an uncooperative one is stopped hard after the grace,
a worker killed after the request leaves the job to the reaper (cancelled, not rerun),
and a worker that was paused past its lease cannot overwrite the outcome."""

from __future__ import annotations

import signal
import time

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.decisions import request_cancel
from tests.worker.procs import Workers, attempts_of, effect_rows, job, wait_for

pytestmark = pytest.mark.slow


def add(engine: sa.Engine, job_type: str, payload: dict | None = None, **kw: object) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload or {}, **kw)  # type: ignore[arg-type]


def cancel_running(engine: sa.Engine, job_id: int) -> None:
    with engine.begin() as conn:
        asked = request_cancel(conn, [job_id], actor="sam", reason="wrong month", now=db_now(conn))
    assert asked == [job_id]


def started(engine: sa.Engine, job_id: int, attempt: int = 1) -> None:
    wait_for(lambda: effect_rows(engine, f"run:{job_id}:{attempt}"), 15)


def test_a_cooperative_handler_stops_on_ctx_cancelled(engine: sa.Engine, procs: Workers) -> None:
    job_id = add(engine, "t.cooperative")
    worker = procs.start("--concurrency", "1", env={"JOBDESK_CANCEL_GRACE_SECONDS": "30"})
    started(engine, job_id)
    asked_at = time.monotonic()
    cancel_running(engine, job_id)
    wait_for(lambda: job(engine, job_id).status == "cancelled", 10)
    assert time.monotonic() - asked_at < 10  # long before the 30 s grace
    row = job(engine, job_id)
    assert (row.cancelled_by, row.cancel_reason, row.locked_by) == ("sam", "wrong month", None)
    ((attempt),) = attempts_of(engine, job_id)
    assert attempt.outcome == "cancelled"
    assert "stopped after the cancel request" in attempt.error
    assert "cancelled" in attempt.error  # the handler's own words
    assert not effect_rows(engine, f"end:{job_id}:")
    assert "cancel_requested" in worker.log()
    assert worker.stop() == 0


def test_an_uncooperative_handler_is_stopped_hard_after_the_grace(
    engine: sa.Engine, procs: Workers
) -> None:
    stuck = add(engine, "t.sleep", {"seconds": 60})
    worker = procs.start("--concurrency", "1", env={"JOBDESK_CANCEL_GRACE_SECONDS": "1"})
    started(engine, stuck)
    behind = add(engine, "t.effect", {"key": "behind-the-cancel"})
    cancel_running(engine, stuck)
    wait_for(lambda: job(engine, stuck).status == "cancelled", 10)
    ((attempt),) = attempts_of(engine, stuck)
    assert attempt.outcome == "cancelled"
    assert "did not stop within the 1s grace" in attempt.error
    # The slot is free again: the job waiting behind the stuck one runs.
    wait_for(lambda: job(engine, behind).status == "succeeded", 10)
    assert not effect_rows(engine, f"end:{stuck}:")
    assert "job_stopped_hard" in worker.log()
    assert worker.alive()


def test_a_handler_that_finishes_its_work_anyway_succeeds(
    engine: sa.Engine, procs: Workers
) -> None:
    job_id = add(engine, "t.sleep", {"seconds": 2})
    procs.start("--concurrency", "1", env={"JOBDESK_CANCEL_GRACE_SECONDS": "30"})
    started(engine, job_id)
    cancel_running(engine, job_id)
    wait_for(lambda: job(engine, job_id).status == "succeeded", 10)
    assert [a.outcome for a in attempts_of(engine, job_id)] == ["succeeded"]
    assert job(engine, job_id).cancelled_by == "sam"  # the request stays on record


def test_a_worker_killed_after_the_request_leaves_the_job_cancelled_not_rerun(
    engine: sa.Engine, procs: Workers
) -> None:
    job_id = add(engine, "t.sleep", {"seconds": 60}, max_attempts=3)
    first = procs.start(env={"JOBDESK_CANCEL_GRACE_SECONDS": "30"})
    started(engine, job_id)
    cancel_running(engine, job_id)
    first.signal(signal.SIGKILL)
    first.proc.wait(5)
    assert job(engine, job_id).status == "running"
    procs.start()  # its reaper finds the expired lease
    wait_for(lambda: job(engine, job_id).status == "cancelled", 20)
    outcomes = [(a.attempt, a.outcome) for a in attempts_of(engine, job_id)]
    assert outcomes == [(1, "cancelled")]
    assert "worker lost" in attempts_of(engine, job_id)[0].error
    time.sleep(1)
    assert not effect_rows(engine, f"run:{job_id}:2")


def test_a_worker_paused_past_its_lease_cannot_overwrite_the_outcome(
    engine: sa.Engine, procs: Workers
) -> None:
    job_id = add(engine, "t.sleep", {"seconds": 4})
    paused = procs.start("--concurrency", "1", env={"JOBDESK_CANCEL_GRACE_SECONDS": "30"})
    started(engine, job_id)
    paused.signal(signal.SIGSTOP)
    try:
        cancel_running(engine, job_id)
        procs.start("--concurrency", "1")  # its reaper ends the job cancelled
        wait_for(lambda: job(engine, job_id).status == "cancelled", 20)
    finally:
        paused.signal(signal.SIGCONT)
    # The paused worker's handler finishes and its completion is fenced.
    wait_for(lambda: effect_rows(engine, f"end:{job_id}:1"), 15)
    wait_for(lambda: "lease_lost" in paused.log(), 10)
    row = job(engine, job_id)
    assert (row.status, row.result) == ("cancelled", None)
    assert [a.outcome for a in attempts_of(engine, job_id)] == ["cancelled"]
    assert paused.stop() == 0
