"""The leader's redrive task: one step of every redrive at work per tick."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.redrives.commands import start_redrive
from jobdesk.shared.redrives.rules import StopRule
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance import redriver
from jobdesk.worker.maintenance.tasks import default_tasks
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def test_the_redriver_is_a_leader_task_stepping_each_second(engine: sa.Engine) -> None:
    task = next(t for t in default_tasks() if t.name == "redriver")
    assert task.interval_seconds(Settings()) == 1.0
    with engine.begin() as conn:
        for _ in range(3):
            make_job(conn, job_type="email.send", queue="email", status="dead", attempts=5)
        start_redrive(
            conn,
            JobFilters(job_type="email.send"),
            rate_per_minute=60,
            stop_rule=StopRule(),
            actor="sam",
            reason="smtp is back",
            now=NOW,
        )
    assert redriver.run_once(engine, NOW) == 1
    assert redriver.run_once(engine, NOW) == 0  # the second leader of a hand-over


def test_a_redrive_whose_step_fails_leaves_the_others_going(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with engine.begin() as conn:
        for job_type in ("email.send", "email.send", "webhook.deliver"):
            make_job(conn, job_type=job_type, status="dead", attempts=5)
        first, second = (
            start_redrive(
                conn,
                JobFilters(job_type=job_type),
                rate_per_minute=60,
                stop_rule=StopRule(),
                actor="sam",
                reason="back",
                now=NOW,
            )
            for job_type in ("email.send", "webhook.deliver")
        )
    real = redriver.redrive_step

    def broken_first(conn: sa.Connection, redrive_id: int, *, now: datetime) -> Any:
        if redrive_id == first:
            raise RuntimeError("a bug in one redrive")
        return real(conn, redrive_id, now=now)

    monkeypatch.setattr(redriver, "redrive_step", broken_first)
    with caplog.at_level(logging.ERROR, logger="jobdesk.maintenance.redriver"):
        assert redriver.run_once(engine, NOW) == 1  # the second one's
    assert f"redrive #{first}: its step failed" in caplog.text
    assert second != first
