"""Pausing a queue (R26): the claim skips it on every worker at once, the waiting jobs
keep their attempts, and both directions are audited with who and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import AuditAction, audit_log
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.queues import pause_queue, paused_queues, resume_queue
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def take(engine: sa.Engine, **kw: object) -> list[int]:
    with engine.begin() as conn:
        return [j.id for j in claim(conn, worker_id="w1", limit=100, now=NOW, **kw)]  # type: ignore[arg-type]


def test_a_paused_queue_is_not_claimed_and_its_jobs_keep_their_attempts(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        held = make_job(conn, queue="webhooks", next_run_at=NOW - timedelta(minutes=5))
        retry = make_job(
            conn, queue="webhooks", status="failed", attempts=2, next_run_at=NOW - timedelta(1)
        )
        other = make_job(conn, queue="email", next_run_at=NOW - timedelta(minutes=5))
        pause_queue(conn, "webhooks", actor="ada", reason="CRM maintenance", now=NOW)
    assert take(engine) == [other]
    assert take(engine, queues=["webhooks"]) == []
    with engine.connect() as conn:
        assert (job_row(conn, held).status, job_row(conn, held).attempts) == ("queued", 0)
        assert (job_row(conn, retry).status, job_row(conn, retry).attempts) == ("failed", 2)
        pause = paused_queues(conn)["webhooks"]
    assert (pause.paused_by, pause.reason) == ("ada", "CRM maintenance")

    with engine.begin() as conn:
        ended = resume_queue(conn, "webhooks", actor="otto", reason="CRM is back", now=NOW)
    assert ended.reason == "CRM maintenance"
    assert sorted(take(engine)) == sorted([held, retry])
    with engine.connect() as conn:
        entries = list(conn.execute(sa.select(audit_log).order_by(audit_log.c.id)))
    assert [(e.action, e.actor, e.subject, e.reason) for e in entries] == [
        (AuditAction.QUEUE_PAUSE, "ada", "queue:webhooks", "CRM maintenance"),
        (AuditAction.QUEUE_RESUME, "otto", "queue:webhooks", "CRM is back"),
    ]
    assert entries[1].details == {"paused_by": "ada", "paused_reason": "CRM maintenance"}


def test_a_queue_with_no_jobs_yet_can_be_paused_ahead_of_a_deploy(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        pause_queue(conn, "imports", actor="ada", reason="new importer rolls out", now=NOW)
        job_id = make_job(conn, queue="imports", next_run_at=NOW - timedelta(seconds=1))
    assert take(engine) == []
    with engine.begin() as conn:
        resume_queue(conn, "imports", actor="ada", now=NOW)
    assert take(engine) == [job_id]


@pytest.mark.parametrize(
    ("queue", "reason", "field", "text"),
    [
        ("webhooks", "", "reason", "is required"),
        ("webhooks", "   ", "reason", "is required"),
        ("web hooks", "x", "queue", ""),
        ("webhooks", "x" * 1001, "reason", "the limit is 1,000"),
        ("webhooks", "a\x00b", "reason", "NUL"),
    ],
)
def test_bad_pauses_are_refused_naming_the_field(
    engine: sa.Engine, queue: str, reason: str, field: str, text: str
) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError) as refused:
        pause_queue(conn, queue, actor="ada", reason=reason, now=NOW)
    assert refused.value.field == field
    assert text in refused.value.message
    with engine.connect() as conn:
        assert paused_queues(conn) == {}


def test_pausing_twice_and_resuming_a_running_queue_say_what_is_going_on(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        pause_queue(conn, "email", actor="ada", reason="SMTP provider outage", now=NOW)
    with engine.begin() as conn, pytest.raises(ValidationError, match="already paused") as twice:
        pause_queue(conn, "email", actor="otto", reason="me too", now=NOW)
    assert "by ada" in twice.value.message
    assert "SMTP provider outage" in twice.value.message
    with engine.begin() as conn, pytest.raises(ValidationError, match="reports is not paused"):
        resume_queue(conn, "reports", actor="otto", now=NOW)
