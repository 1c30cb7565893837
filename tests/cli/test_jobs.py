"""`jobdesk jobs cancel` as a user runs it: a real subprocess on both databases."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from tests import zygote
from tests.factories import job_row, make_job

JOBDESK = str(Path(sys.executable).parent / "jobdesk")


def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env["JOBDESK_DATABASE_URL"] = url
    return zygote.run([JOBDESK, *args], env=env)


@pytest.mark.slow
def test_cancel_queued_and_running_jobs_and_refuse_the_rest(engine: sa.Engine, db_url: str) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        queued = make_job(conn)
        running = make_job(
            conn,
            status="running",
            attempts=1,
            locked_by="w1",
            lease_token=3,
            lease_expires_at=now + timedelta(seconds=30),
        )
        done = make_job(conn, status="succeeded")
    result = run(db_url, "jobs", "cancel", str(queued), str(running), str(done), "--reason", "dupe")
    assert result.returncode == 1
    assert f"job #{queued} cancelled" in result.stdout
    assert f"job #{running} is running: its worker was asked to stop it" in result.stdout
    assert f"not cancelled: job #{done} is succeeded" in result.stderr
    with engine.connect() as conn:
        assert job_row(conn, queued).status == "cancelled"
        row = job_row(conn, running)
        actors = set(conn.execute(sa.select(audit_log.c.actor)).scalars())
    assert (row.status, row.cancel_reason) == ("running", "dupe")
    assert actors == {row.cancelled_by}
    assert str(row.cancelled_by).startswith("cli")


@pytest.mark.slow
def test_cancel_needs_a_reason(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn)
    missing = run(db_url, "jobs", "cancel", str(job_id))
    assert missing.returncode == 2
    assert "--reason" in missing.stderr
    blank = run(db_url, "jobs", "cancel", str(job_id), "--reason", "  ")
    assert blank.returncode == 1
    assert "reason" in blank.stderr
    with engine.connect() as conn:
        assert job_row(conn, job_id).status == "queued"
