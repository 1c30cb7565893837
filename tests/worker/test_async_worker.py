"""`async def` handlers in a real `jobdesk worker` process: hundreds in flight on its
event loop beside the plain handlers' threads, under the same rules — timeout (the task
cancelled; a coroutine that ignores it or blocks the loop does not stop the worker),
operator cancel, graceful shutdown."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.decisions import request_cancel
from jobdesk.shared.core.models import jobs
from tests.worker.jobmods import asyncjobs
from tests.worker.procs import Workers, all_succeeded, attempts_of, job, wait_for

pytestmark = pytest.mark.slow

ASYNC_JOBS = ("--jobs", asyncjobs.__name__)  # imported here too: enqueue knows their defaults


def add(engine: sa.Engine, job_type: str, payload: dict[str, Any] | None = None) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload or {})


def results(engine: sa.Engine, ids: list[int]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs.c.result).where(jobs.c.id.in_(ids))).scalars())


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) spans that overlap at one moment."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_hundreds_of_coroutines_run_at_once_in_one_default_worker(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob("a.sleep", {"seconds": 0.5}) for _ in range(400)])
        plain = enqueue(conn, "t.effect", {"key": "beside"})
    worker = procs.start(*ASYNC_JOBS)  # defaults: 10 threads, 200 coroutines
    wait_for(lambda: all_succeeded(engine, [*ids, plain]), 60)
    found = results(engine, ids)
    spans = [(r["started"], r["ended"]) for r in found]
    assert most_at_once(spans) >= 100  # ten threads would have run ten at a time
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    # 400 x 0.5 s: 20 s on ten threads; two or three rounds of 200 here.
    assert last - first < 10, f"{last - first:.1f}s"
    assert len({r["pid"] for r in found}) == 1
    assert worker.stop() == 0


def test_an_overrun_is_a_timeout_and_the_worker_goes_on(engine: sa.Engine, procs: Workers) -> None:
    overrun = add(engine, "a.overrun")
    stubborn = add(engine, "a.stubborn", {"seconds": 4})
    worker = procs.start(*ASYNC_JOBS)
    wait_for(lambda: job(engine, overrun).status == "dead", 15)
    wait_for(lambda: job(engine, stubborn).status == "dead", 15)
    for job_id in (overrun, stubborn):
        (attempt,) = attempts_of(engine, job_id)
        assert attempt.outcome == "timeout"
        assert "ran longer than its 1s timeout" in attempt.error
    # The worker goes on: coroutines and plain handlers after the timeouts run.
    later = [add(engine, "a.sleep", {"seconds": 0.1}), add(engine, "t.effect", {"key": "later"})]
    wait_for(lambda: all_succeeded(engine, later), 15)
    assert "its task is cancelled" in worker.log()
    assert worker.stop() == 0


def test_a_coroutine_that_blocks_the_loop_loses_the_loop_not_the_worker(
    engine: sa.Engine, procs: Workers
) -> None:
    blocker = add(engine, "a.blocking", {"seconds": 6})
    worker = procs.start(*ASYNC_JOBS)
    wait_for(lambda: job(engine, blocker).status == "running", 15)
    waiting = add(engine, "a.sleep", {"seconds": 0.1})  # behind the blocked loop
    wait_for(lambda: job(engine, blocker).status == "dead", 15)
    # Cancelled at 1 s, still blocking 2 s later: a fresh loop takes the work while
    # the old one is still stuck in its 6 s sleep.
    wait_for(lambda: job(engine, waiting).status == "succeeded", 10)
    assert "the event loop is blocked" in worker.log()
    (attempt,) = attempts_of(engine, blocker)
    assert attempt.outcome == "timeout"
    assert worker.alive()
    assert worker.stop() == 0


def test_an_operator_cancel_reaches_a_coroutine(engine: sa.Engine, procs: Workers) -> None:
    job_id = add(engine, "a.cooperative")
    worker = procs.start(*ASYNC_JOBS, env={"JOBDESK_CANCEL_GRACE_SECONDS": "30"})
    wait_for(lambda: job(engine, job_id).status == "running", 15)
    with engine.begin() as conn:
        assert request_cancel(conn, [job_id], actor="sam", reason="dup", now=db_now(conn))
    wait_for(lambda: job(engine, job_id).status == "cancelled", 10)
    (attempt,) = attempts_of(engine, job_id)
    assert attempt.outcome == "cancelled"
    assert "stopped on request" in attempt.error
    assert worker.stop() == 0


def test_shutdown_lets_coroutines_finish_then_releases_the_rest(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        quick = enqueue_many(conn, [NewJob("a.sleep", {"seconds": 1}) for _ in range(20)])
        slow = enqueue(conn, "a.sleep", {"seconds": 60})
    worker = procs.start(*ASYNC_JOBS, env={"JOBDESK_SHUTDOWN_TIMEOUT_SECONDS": "3"})
    wait_for(lambda: job(engine, slow).status == "running", 15)
    time.sleep(0.2)
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(20) == 0
    assert all_succeeded(engine, quick)
    released = job(engine, slow)
    assert (released.status, released.attempts) == ("queued", 0)
