"""Maintenance acts for the worker that runs it: its job types' retry policies and its
effective heartbeat, never a process-wide registry."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.retry import RetryPolicy, Schedule
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance.reaper import Reaper
from jobdesk.worker.maintenance.tasks import MaintenanceContext, default_tasks
from tests.factories import make_job

HOUR_LATER = RetryPolicy(Schedule.of_seconds([3600], jitter=0))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def context(engine: sa.Engine, heartbeat: float) -> MaintenanceContext:
    return MaintenanceContext(
        engine, Settings(), policy_for=lambda job_type: HOUR_LATER, heartbeat_seconds=heartbeat
    )


def expired_job(engine: sa.Engine) -> tuple[int, object]:
    with engine.begin() as conn:
        make_job(conn, job_type="own.type", max_attempts=3)
        now = db_now(conn)
        [held] = claim(conn, worker_id="gone", limit=1, lease_seconds=1, now=now)
    return held.id, now + timedelta(seconds=5)


def test_the_reaper_rescues_with_the_retry_policy_of_the_worker_it_runs_in(
    engine: sa.Engine,
) -> None:
    job_id, later = expired_job(engine)
    clock = FakeClock()
    reaper = Reaper(clock)
    ctx = context(engine, heartbeat=1.0)
    assert reaper.scheduled_run(ctx, later) == 0  # first contact: held back
    clock.now += 1.6
    assert reaper.scheduled_run(ctx, later) == 1
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(jobs.c.status, jobs.c.next_run_at).where(jobs.c.id == job_id)
        ).one()
    assert row.status == "failed"
    assert row.next_run_at - later == timedelta(hours=1)


def test_the_hold_back_after_lost_contact_follows_the_effective_heartbeat(
    engine: sa.Engine,
) -> None:
    """A 4 s lease heartbeats every 1.33 s: the reaper holds back 2 s, not 15 s."""
    _, later = expired_job(engine)
    clock = FakeClock()
    reaper = Reaper(clock)
    ctx = context(engine, heartbeat=4 / 3)
    assert reaper.scheduled_run(ctx, later) == 0
    clock.now += 2.1
    assert reaper.scheduled_run(ctx, later) == 1


def test_each_scheduler_gets_its_own_reaper() -> None:
    first = next(t for t in default_tasks() if t.name == "reaper")
    second = next(t for t in default_tasks() if t.name == "reaper")
    assert first.run != second.run
