"""The leader's flow-control tasks as the scheduler runs them: a hold whose end time
passed is released, and a slot a race left free is filled."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.flow.holds import HoldTarget, place_hold
from jobdesk.shared.flow.models import concurrency_keys
from jobdesk.shared.operator.queries.holds import quarantines
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance.tasks import MaintenanceContext, default_tasks


def run_task(engine: sa.Engine, name: str) -> object:
    task = next(t for t in default_tasks() if t.name == name)
    context = MaintenanceContext(
        engine, Settings(), policy_for=lambda _: RetryPolicy(), heartbeat_seconds=1.0
    )
    return task.run(context, db_now_of(engine))


def db_now_of(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        return db_now(conn)


def test_a_hold_ends_at_its_end_time(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "t.any", {}, concurrency_key="tenant:1")
        now = db_now(conn)
        place_hold(
            conn,
            HoldTarget.parse("concurrency_key", "tenant:1"),
            reason="partner outage",
            actor="ana",
            now=now,
            until=now + timedelta(seconds=0.3),
        )
    assert run_task(engine, "hold_expiry") == 0
    time.sleep(0.4)
    assert run_task(engine, "hold_expiry") == 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar() == (
            "queued"
        )
        assert quarantines(conn, active=True) == []


@pytest.mark.postgresql_only
def test_the_refill_task_fills_a_slot_left_free(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs),
            [{"job_type": "t.any", "concurrency_key": "tenant:2", "concurrency_limit": 1,
              "status": "waiting", "waiting_for": 0}] * 2,
        )  # fmt: skip
        conn.execute(sa.insert(concurrency_keys).values(key="tenant:2", slot_limit=1))
    assert run_task(engine, "slot_refill") == 1
    assert run_task(engine, "slot_refill") == 0
