"""The Queues page (R26): the backlog of each queue, recent outcomes, who serves it, and
pause / resume with a reason for operators."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.core.queues import paused_queues
from tests.dashboard.conftest import NOW, Browser
from tests.factories import make_job


def test_queues_show_counts_oldest_waiting_and_recent_outcomes(
    viewer: Browser, engine: sa.Engine
) -> None:
    now = datetime.now(UTC)  # the page counts windows back from the database's clock
    with engine.begin() as conn:
        for _ in range(3):
            make_job(conn, queue="webhooks", next_run_at=NOW - timedelta(minutes=12))
        done = make_job(conn, queue="webhooks", status="succeeded", attempts=1)
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=done, attempt=1, outcome="succeeded", finished_at=now - timedelta(minutes=2)
            )
        )
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=done, attempt=1, outcome="failed", finished_at=now - timedelta(minutes=30)
            )
        )
        make_job(conn, queue="email")
    page = viewer.get("/queues")
    text = page.get_data(as_text=True)
    assert page.status_code == 200
    row = text.split('id="queue-webhooks"')[1].split("</tr>")[0]
    assert "/jobs?queue=webhooks&amp;status=queued" in row
    assert ">3</a>" in row
    assert "5 min: 1 attempt succeeded, 0 failed" in row
    assert "60 min: 1 attempt succeeded," in row
    assert "1 failed" in row
    assert "no live worker" in row
    assert 'id="queue-email"' in text
    assert "Pause" not in row  # viewers see no actions


def test_an_operator_pauses_and_resumes_a_queue_with_a_reason(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        make_job(conn, queue="webhooks")
    refused = operator.post("/queues/webhooks/pause", {"reason": "  "})
    assert refused.status_code == 303
    assert "not paused: the reason is required" in operator.get("/queues").get_data(as_text=True)
    done = operator.post("/queues/webhooks/pause", {"reason": "CRM maintenance until 08:10"})
    assert done.status_code == 303
    page = operator.get("/queues").get_data(as_text=True)
    row = page.split('id="queue-webhooks"')[1].split("</tr>")[0]
    assert "paused" in row
    assert "CRM maintenance until 08:10" in row
    assert "by otto" in row
    assert "Resume" in row
    with engine.connect() as conn:
        assert paused_queues(conn)["webhooks"].paused_by == "otto"
    assert operator.post("/queues/webhooks/resume", {"reason": "CRM is back"}).status_code == 303
    with engine.connect() as conn:
        assert paused_queues(conn) == {}
        entries = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.reason)
            .where(audit_log.c.subject == "queue:webhooks")
            .order_by(audit_log.c.id)
        )
        actions = [tuple(row) for row in entries]
    assert actions == [
        ("queue.pause", "CRM maintenance until 08:10"),
        ("queue.resume", "CRM is back"),
    ]
    again = operator.post("/queues/webhooks/resume", {})
    assert again.status_code == 303
    assert "webhooks is not paused" in operator.get("/queues").get_data(as_text=True)


def test_the_overview_says_which_queues_are_paused(viewer: Browser, engine: sa.Engine) -> None:
    from jobdesk.shared.core.queues import pause_queue

    with engine.begin() as conn:
        make_job(conn, queue="webhooks", next_run_at=NOW - timedelta(minutes=3))
        pause_queue(conn, "webhooks", actor="ada", reason="CRM maintenance", now=NOW)
    text = viewer.get("/").get_data(as_text=True)
    assert "1 queue paused:" in text
    assert "CRM maintenance" in text
    ages = text.split("Oldest waiting job per queue")[1].split("</section>")[0]
    assert 'state-paused">paused' in ages
