"""`jobdesk redrives start|list|show|pause|resume|cancel` through the command line's own
entry point, on both databases: what is printed, what is refused (one clear line), and
what the audit log keeps."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.redrives.models import redrives
from jobdesk.shared.redrives.stepper import redrive_step
from tests.factories import make_job

CRM_ERROR = "ConnectTimeout: POST https://crm.example.com/hooks?token=abc123 timed out"
GROUP = fingerprint(CRM_ERROR)


def run(db_url: str, *args: str, stdin: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    result = CliRunner().invoke(cli, ["--database-url", db_url, *args], env=env, input=stdin)
    return result.exit_code, result.output


def dead(conn: sa.Connection, count: int, **fields: Any) -> list[int]:
    values: dict[str, Any] = {
        "job_type": "webhook.deliver",
        "queue": "webhooks",
        "status": "dead",
        "attempts": 5,
        "last_error": CRM_ERROR,
        "error_fingerprint": GROUP,
        "finished_at": datetime.now(UTC) - timedelta(hours=1),
        **fields,
    }
    return [make_job(conn, payload={"endpoint": "crm", "n": n}, **values) for n in range(count)]


def start(db_url: str, *more: str) -> tuple[int, str]:
    return run(
        db_url, "redrives", "start", "--group", GROUP, "--reason", "CRM is back", "--yes", *more
    )


def test_start_on_an_error_group_previews_then_starts(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 4)
        dead(conn, 1, last_error="SMTP 550", error_fingerprint=fingerprint("SMTP 550"))
    code, out = run(
        db_url, "redrives", "start", "--group", GROUP, "--rate", "2/s", "--stop-after", "3/10",
        "--reason", "CRM is back", "--by", "ana", stdin="y\n",
    )  # fmt: skip
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith(f"redrive 4 dead jobs (error group {GROUP} (“ConnectTimeout")
    assert "token=***" in lines[0]  # the quoted error is masked
    assert "abc123" not in out
    assert lines[0].endswith("at 120/min, stopping if 3 of 10 new jobs fail again")
    assert lines[-1] == "started redrive #1"
    with engine.connect() as conn:
        row = conn.execute(sa.select(redrives)).one()
        entry = conn.execute(sa.select(audit_log)).one()
    assert (row.total, row.rate_per_minute, row.stop_failures, row.stop_window) == (4, 120, 3, 10)
    assert (entry.action, entry.actor, entry.reason) == ("redrive.start", "ana", "CRM is back")


def test_start_by_type_and_error_text_with_the_defaults(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 2)
        dead(conn, 1, job_type="email.send", queue="email")
    code, out = run(
        db_url, "redrives", "start", "--job-type", "webhook.deliver", "--error-contains",
        "ConnectTimeout", "--reason", "CRM is back", "--yes",
    )  # fmt: skip
    assert code == 0, out
    assert out.splitlines()[0] == (
        "redrive 2 dead jobs (type webhook.deliver, error contains “ConnectTimeout”) at "
        "60/min, stopping if 5 of 20 new jobs fail again"
    )
    with engine.connect() as conn:
        row = conn.execute(sa.select(redrives)).one()
    assert row.selection == {"type": "webhook.deliver", "error": "ConnectTimeout"}
    assert row.created_by.startswith("cli")


def test_answering_no_changes_nothing(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 1)
    code, out = run(db_url, "redrives", "start", "--group", GROUP, "--reason", "x", stdin="n\n")
    assert code == 1
    assert "cancelled; nothing changed" in out
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(redrives)).scalar() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "0/min"], "Error: rate: must be from 1 to 10,000 jobs per minute, not 0"),
        (["--rate", "fast"], "Error: rate: 'fast' is not a rate like 60/min, 2/s or 120/h"),
        (["--rate", "20000/min"], "Error: rate: must be from 1 to 10,000 jobs per minute"),
        (["--stop-after", "20/5"], "Error: stop_rule: 20 failures of 5 jobs can never happen"),
        (["--stop-after", "half"], "Error: stop_rule: 'half' is not a rule like 5/20"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    engine: sa.Engine, db_url: str, args: list[str], message: str
) -> None:
    with engine.begin() as conn:
        dead(conn, 1)
    code, out = start(db_url, *args)
    assert code == 1
    assert out.startswith(message), out
    assert len(out.strip().splitlines()) == 1


def test_a_selection_that_chooses_nothing_is_refused(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 1)
    code, out = run(db_url, "redrives", "start", "--reason", "x", "--yes")
    assert code == 1
    assert out.strip() == (
        "Error: selection: choose what to redrive: an error group, a job type, a queue or "
        "an error text"
    )
    code, out = run(db_url, "redrives", "start", "--type", "email.send", "--reason", "x", "--yes")
    assert code == 1
    assert out.strip() == (
        "Error: nothing to redrive: no dead job that needs a decision matches type email.send"
    )
    code, out = run(db_url, "redrives", "start", "--group", "xyz", "--reason", "x", "--yes")
    assert (code, out.strip()) == (1, "Error: fingerprint: must be 16 hexadecimal digits")
    code, out = run(db_url, "redrives", "start", "--group", GROUP, "--yes")
    assert code == 2
    assert "Missing option '--reason'" in out


def test_list_show_pause_resume_cancel(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 3)
    assert start(db_url)[0] == 0  # at 60 a minute
    with engine.begin() as conn:
        redrive_step(conn, 1, now=datetime.now(UTC))  # one at once

    code, out = run(db_url, "redrives", "list")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("#1      running   1 of 3 requeued, 0 failed again, ")
    assert lines[0].endswith("(60/min, stop 5/20, by " + lines[0].rsplit("by ", 1)[1])
    assert lines[1].strip().startswith(f"error group {GROUP}")

    code, out = run(db_url, "redrives", "pause", "1", "--reason", "CRM slow again", "--by", "ana")
    assert (code, out) == (0, "paused redrive #1\n")
    code, out = run(db_url, "redrives", "pause", "1", "--reason", "again")
    assert code == 1
    assert out.strip() == "Error: redrive #1 is paused; only a running redrive can be paused"
    code, out = run(db_url, "redrives", "show", "1")
    assert code == 0, out
    assert out.splitlines()[0].startswith("redrive #1 paused: 1 of 3 requeued")
    assert "pace: 60/min; stops once 5 of 20 new jobs fail again" in out
    assert "paused by ana at " in out
    assert out.splitlines()[-1].endswith(": CRM slow again")

    assert run(db_url, "redrives", "resume", "1") == (0, "resumed redrive #1\n")
    code, out = run(db_url, "redrives", "cancel", "1")
    assert code == 2
    assert "Missing option '--reason'" in out
    code, out = run(db_url, "redrives", "cancel", "1", "--reason", "enough", "--actor", "bob")
    assert (code, out) == (0, "cancelled redrive #1\n")
    code, out = run(db_url, "redrives", "resume", "1")
    assert code == 1
    assert out.strip() == "Error: redrive #1 is cancelled; only a paused redrive can be resumed"
    code, out = run(db_url, "redrives", "pause", "7", "--reason", "x")
    assert (code, out.strip()) == (1, "Error: redrive #7 does not exist")
    code, out = run(db_url, "redrives", "show", "7")
    assert (code, out.strip()) == (1, "Error: redrive #7 does not exist")

    code, out = run(db_url, "redrives", "list", "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["state"] == "cancelled"
    assert listed["change_reason"] == "enough"
    assert listed["progress"] == "1 of 3 requeued, 0 failed again"
    code, out = run(db_url, "redrives", "list", "--active")
    assert (code, out) == (0, "no redrives yet\n")
    with engine.connect() as conn:
        trail = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor)
            .where(audit_log.c.subject == "redrive:1", audit_log.c.action != "retry")
            .order_by(audit_log.c.id)
        ).all()
    assert [tuple(row) for row in trail][1:] == [
        ("redrive.pause", "ana"),
        ("redrive.resume", trail[0].actor),
        ("redrive.cancel", "bob"),
    ]


def test_show_lists_the_new_jobs_that_failed_again(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        dead(conn, 2)
    assert start(db_url, "--rate", "600/min", "--stop-after", "1/2")[0] == 0
    now = datetime.now(UTC)
    with engine.begin() as conn:
        redrive_step(conn, 1, now=now + timedelta(seconds=1))
        new = conn.execute(sa.text("SELECT max(id) FROM jobdesk_jobs")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO jobdesk_job_attempts (job_id, attempt, outcome, error) "
                "VALUES (:id, 1, 'failed', :error)"
            ),
            {"id": new, "error": CRM_ERROR},
        )
        conn.execute(
            sa.text("UPDATE jobdesk_jobs SET status = 'failed', last_error = :e WHERE id = :id"),
            {"id": new, "e": CRM_ERROR},
        )
        redrive_step(conn, 1, now=now + timedelta(seconds=2))
    code, out = run(db_url, "redrives", "show", "1")
    assert code == 0, out
    assert out.splitlines()[0] == "redrive #1 stopped: 2 of 2 requeued, 1 failed again"
    assert "stopped: 1 of the first 1 new jobs failed again (stop rule: 1 of 2" in out
    failing = out.splitlines()[-1]
    assert failing.startswith(f"  #2 -> #{new} failed")
    assert "token=***" in failing
    assert "abc123" not in out
