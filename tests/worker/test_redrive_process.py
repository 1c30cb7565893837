"""Paced redrives run by a real `jobdesk worker`: its maintenance leader steps them, its
slots run the new jobs, and the redrive finishes — or stops by its rule — on its own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.redrives.commands import start_redrive
from jobdesk.shared.redrives.models import redrives
from jobdesk.shared.redrives.rules import StopRule
from tests.factories import make_job
from tests.worker.procs import Workers, wait_for

pytestmark = pytest.mark.slow


def _dead(conn: sa.Connection, job_type: str, count: int) -> list[int]:
    return [
        make_job(
            conn,
            job_type=job_type,
            payload={"key": f"redrive-{n}"},
            status="dead",
            attempts=5,
            max_attempts=5,
            last_error="ConnectionError: smtp down",
        )
        for n in range(count)
    ]


def _start(engine: sa.Engine, job_type: str, rate: int, rule: StopRule) -> int:
    with engine.begin() as conn:
        return start_redrive(
            conn,
            JobFilters(job_type=job_type),
            rate_per_minute=rate,
            stop_rule=rule,
            actor="sam",
            reason="the cause is fixed",
            now=db_now(conn),
        )


def _redrive(engine: sa.Engine, redrive_id: int) -> sa.Row[Any]:
    with engine.connect() as conn:
        return conn.execute(sa.select(redrives).where(redrives.c.id == redrive_id)).one()


def _new_jobs(engine: sa.Engine, dead: list[int]) -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(jobs.c.id, jobs.c.status, jobs.c.created_at, jobs.c.retried_from_id)
                .where(jobs.c.retried_from_id.in_(dead))
                .order_by(jobs.c.created_at, jobs.c.id)
            )
        )


def test_a_worker_redrives_dead_jobs_at_the_pace_until_the_redrive_finishes(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        dead = _dead(conn, "t.effect", 12)
    rate = 240  # four a second
    redrive_id = _start(engine, "t.effect", rate, StopRule(failures=3, window=5))
    started_at = _redrive(engine, redrive_id).next_at
    worker = procs.start()

    wait_for(lambda: _redrive(engine, redrive_id).state == "finished", 30)
    redrive = _redrive(engine, redrive_id)
    assert (redrive.total, redrive.requeued, redrive.succeeded, redrive.failed) == (12, 12, 12, 0)
    new = _new_jobs(engine, dead)
    assert sorted(row.retried_from_id for row in new) == dead  # one new job per dead one
    assert {row.status for row in new} == {"succeeded"}
    # Never ahead of the pace: the k-th requeue comes k / rate after the start at the
    # earliest (a late step may catch up, never get ahead).
    for k, row in enumerate(new):
        assert row.created_at - started_at >= timedelta(seconds=k * 60 / rate), (k, worker.log())
    with engine.connect() as conn:
        resolutions = conn.execute(
            sa.select(jobs.c.resolution, sa.func.count())
            .where(jobs.c.id.in_(dead))
            .group_by(jobs.c.resolution)
        ).all()
    assert [tuple(row) for row in resolutions] == [("requeued", 12)]


def test_a_worker_stops_a_redrive_whose_new_jobs_fail_again(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        dead = _dead(conn, "t.permanent", 40)
    redrive_id = _start(engine, "t.permanent", 120, StopRule(failures=3, window=5))
    procs.start()

    wait_for(lambda: _redrive(engine, redrive_id).state == "stopped", 30)
    redrive = _redrive(engine, redrive_id)
    assert redrive.failed >= 3
    assert redrive.requeued < redrive.total == 40
    assert "failed again" in (redrive.stopped_reason or "")
    new = _new_jobs(engine, dead)
    assert len(new) == redrive.requeued
    with engine.connect() as conn:
        untouched = conn.execute(
            sa.select(sa.func.count()).where(
                jobs.c.id.in_(dead), jobs.c.status == "dead", jobs.c.resolution.is_(None)
            )
        ).scalar_one()
    assert untouched == 40 - redrive.requeued  # the rest wait for a decision, still dead
