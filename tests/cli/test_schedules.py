"""`jobdesk schedules list|pause|resume|run` against a database a worker declared into."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.shared.core.audit import audit_log
from jobdesk.worker.maintenance.periodic import declare_schedules
from jobdesk.worker.schedules import ScheduleSpec

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def run(db_url: str, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    result = CliRunner().invoke(cli, ["--database-url", db_url, "schedules", *args], env=env)
    return result.exit_code, result.output


def test_list_pause_resume_run(engine: sa.Engine, db_url: str) -> None:
    declare_schedules(
        engine,
        [
            ScheduleSpec(
                "report.nightly",
                "report.generate",
                {"report": "activity"},
                cron="0 2 * * *",
                tz="Europe/Berlin",
            )
        ],
        NOW,
    )
    code, out = run(db_url, "list")
    assert code == 0
    assert "report.nightly  (report.generate, every day at 02:00 (Europe/Berlin))" in out
    assert "never run" in out

    code, out = run(db_url, "pause", "report.nightly", "--reason", "month-end freeze")
    assert (code, out.strip()) == (0, "schedule report.nightly paused")
    code, out = run(db_url, "list", "--json")
    [row] = json.loads(out)
    assert row["paused"] is True
    assert row["paused_reason"] == "month-end freeze"

    code, out = run(db_url, "run", "report.nightly")
    assert code == 0
    assert out.startswith("enqueued job #")
    code, out = run(db_url, "resume", "report.nightly")
    assert code == 0
    assert "resumed; next run" in out
    with engine.connect() as conn:
        actions = list(
            conn.execute(sa.select(audit_log.c.action).order_by(audit_log.c.id)).scalars()
        )
    assert actions == ["schedule.pause", "schedule.run", "schedule.resume"]


def test_mistakes_are_one_line(db_url: str) -> None:
    code, out = run(db_url, "pause", "nope", "--reason", "x")
    assert code == 1
    assert out.strip() == "Error: no schedule named 'nope'"
    code, out = run(db_url, "pause", "nope")
    assert code == 2
    assert "--reason" in out
