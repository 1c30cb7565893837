"""The sign-up story's CRM outage: on-call is paged once, through real SMTP and a real
webhook receiver, and the alert resolves after the endpoint recovers and jobs are requeued."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import alerts as rules
from jobdesk.shared.webhooks.models import webhook_endpoints
from jobdesk.worker.maintenance.alerter import run_once
from jobdesk.worker.testing import drain
from tests.factories import env_settings
from tests.shared.alerts.helpers import alert_rows
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver
from tests.worker.jobs.smtp_server import SmtpSink

SETTINGS = env_settings(
    {
        "alert_email": "oncall@example.com",
        "alert_webhook_endpoint": "oncall",
        "alert_repeated_error_min_jobs": "5",
        # No worker process runs here (drain() does the work), and the last check runs
        # with the clock 16 minutes ahead: keep the queue-health rules out of the story.
        "alert_queue_stalled_enabled": "no",
        "alert_no_consumer_enabled": "no",
    }
)


def alert_posts(receiver: Receiver) -> list[dict]:  # type: ignore[type-arg]
    bodies = [json.loads(s.body) for s in receiver.seen if s.path == "/ok" and s.verified]
    return [body for body in bodies if body["type"] == "jobdesk.alert"]


def unfolded(header: str) -> str:
    """A header as written, before the mail policy folded it over lines."""
    return str(header).replace("\r\n", "").replace("\n", "")


@pytest.mark.slow
def test_crm_outage_pages_each_rule_once_and_resolves_after_requeue(
    engine: sa.Engine, smtp: SmtpSink, receiver: Receiver, jobs_env: dict[str, str]
) -> None:
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/500")))
    receiver.secrets.append(add_test_endpoint(engine, "oncall", receiver.url("/ok")))
    with engine.begin() as conn:
        for user_id in range(5):
            enqueue(
                conn,
                "webhook.deliver",
                {"endpoint": "crm", "event": "user.created", "data": {"user_id": user_id}},
                max_attempts=1,
            )
    assert drain(engine).by_status["dead"] == 5

    first = run_once(engine, None, SETTINGS)
    assert first.opened == 2  # the spike and the repeated error: one incident, both said
    assert len(first.notification_jobs) == 4  # each rule, by email and by webhook
    drain(engine)
    run_once(engine, None, SETTINGS)
    drain(engine)

    error = "WebhookDeliveryError: endpoint crm answered HTTP 500"
    subjects = sorted(unfolded(mail.message["Subject"]) for mail in smtp.received)
    assert subjects == [
        f"[Jobdesk] 5 jobs (webhook.deliver to crm) failed with the same error in the last "
        f"15 min: {error}",
        f"[Jobdesk] 5 webhook.deliver jobs to crm died in the last 15 min: {error}",
    ]
    assert all(mail.recipients == ["oncall@example.com"] for mail in smtp.received)
    bodies = [mail.message.get_payload(decode=True).decode() for mail in smtp.received]
    assert any("Part of the same incident as alert #" in body for body in bodies)
    posts = alert_posts(receiver)
    assert sorted(p["data"]["rule"] for p in posts) == [
        rules.DEAD_LETTER_SPIKE,
        rules.REPEATED_ERROR,
    ]
    spike = next(p for p in posts if p["data"]["rule"] == rules.DEAD_LETTER_SPIKE)
    assert spike["type"] == "jobdesk.alert"
    assert spike["data"]["subject"] == "webhook.deliver:crm"
    assert spike["data"]["state"] == "open"
    assert spike["data"]["error"] == error
    with engine.connect() as conn:
        open_alerts = [(a.rule, a.subject) for a in alert_rows(conn) if a.status == "open"]
    assert (rules.DEAD_LETTER_SPIKE, "webhook.deliver:crm") in open_alerts

    # The CRM comes back; support requeues the dead letters; the copies go through.
    with engine.begin() as conn:
        now = db_now(conn)
        conn.execute(
            sa.update(webhook_endpoints)
            .where(webhook_endpoints.c.name == "crm")
            .values(url=receiver.url("/ok"))
        )
        dead = list(conn.execute(sa.select(jobs).where(jobs.c.status == "dead")))
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.status == "dead")
            .values(resolution="requeued", resolved_by="support", resolved_at=now)
        )
        for row in dead:
            enqueue(conn, "webhook.deliver", row.payload)
    assert drain(engine).by_status["succeeded"] == 5

    # The spike resolves at once (nothing left to triage); the repeated error once its
    # window has passed without new failures.
    later = run_once(engine, now + timedelta(minutes=16), SETTINGS)
    assert later.resolved == 2
    with engine.connect() as conn:
        assert all(a.status == "resolved" for a in alert_rows(conn))
    drain(engine)
    assert len(smtp.received) == 4
    resolved = sorted(unfolded(m.message["Subject"]) for m in smtp.received[2:])
    assert all(subject.startswith("[Jobdesk] Resolved: 5 ") for subject in resolved)
    assert sorted(p["data"]["state"] for p in alert_posts(receiver)) == [
        "open",
        "open",
        "resolved",
        "resolved",
    ]
