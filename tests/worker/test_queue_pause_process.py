"""A paused queue on a running `jobdesk worker` (R26): the worker keeps serving the other
queues, touches none of the paused queue's jobs, and picks them up once it is resumed —
with no restart and no attempt spent."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.queues import pause_queue, resume_queue
from tests.worker.procs import Workers, attempts_of, job, wait_for

pytestmark = pytest.mark.slow


def test_a_running_worker_skips_a_paused_queue_and_resumes_it(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        pause_queue(conn, "reports", actor="ada", reason="month-end close", now=db_now(conn))
        held = [enqueue(conn, "t.effect", {"key": f"r{i}"}, queue="reports") for i in range(5)]
        served = [enqueue(conn, "t.effect", {"key": f"d{i}"}) for i in range(5)]
    worker = procs.start("--queues", "default,reports", "--poll-interval", "0.2")
    wait_for(lambda: all(job(engine, i).status == "succeeded" for i in served), 20)
    time.sleep(1.0)  # several polls: the paused queue stays untouched
    for job_id in held:
        row = job(engine, job_id)
        assert (row.status, row.attempts) == ("queued", 0)
        assert attempts_of(engine, job_id) == []

    with engine.begin() as conn:
        resume_queue(conn, "reports", actor="ada", reason="books closed", now=db_now(conn))
    wait_for(lambda: all(job(engine, i).status == "succeeded" for i in held), 20)
    assert all(job(engine, i).attempts == 1 for i in held)
    assert worker.stop() == 0
    assert "Traceback" not in worker.log()
