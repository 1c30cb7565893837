"""Alerts are delivered as Jobdesk's own jobs, and never through a channel they are about."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings import alerts as rules
from jobdesk.worker.jobs.config import BUILTIN_TEMPLATES
from jobdesk.worker.jobs.email_templates import load_template, render
from jobdesk.worker.maintenance.alerter import run_once
from tests.factories import env_settings
from tests.shared.alerts.helpers import NOW, add_breaker, add_endpoint, ago, alert_rows, dead_jobs
from tests.shared.alerts.test_dedupe import CHANNELS, notification_jobs


def test_email_and_webhook_jobs_carry_the_alert(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        dead_jobs(conn, 6, endpoint="crm", fingerprint=None)
    result = run_once(engine, NOW, env_settings(CHANNELS))
    with engine.connect() as conn:
        (alert,) = alert_rows(conn)
        email, hook = notification_jobs(conn)
    assert sorted(result.notification_jobs) == [email.id, hook.id]
    assert email.job_type == "email.send"
    assert email.idempotency_key == f"{alert.notify_key}:email"
    assert email.payload["to"] == "oncall@example.com"
    assert email.payload["template"] == "alert"
    assert email.payload["event_id"] == alert.notify_key
    context = email.payload["context"]
    assert context["rule"] == "dead_letter_spike"
    assert context["subject"] == "webhook.deliver:crm"
    assert context["state"] == "open"
    assert context["message"] == alert.message
    assert hook.job_type == "webhook.deliver"
    assert hook.payload["endpoint"] == "oncall"
    assert hook.payload["event"] == "jobdesk.alert"
    assert hook.payload["data"] == context


def test_resolution_is_delivered_once(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        add_breaker(conn, "webhook:crm", state="open", opened=ago(hours=1))
    settings = env_settings(CHANNELS)
    run_once(engine, NOW, settings)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobdesk_circuit_breakers SET state = 'closed'"))
    resolved = run_once(engine, NOW + timedelta(minutes=1), settings)
    run_once(engine, NOW + timedelta(minutes=2), settings)
    assert len(resolved.notification_jobs) == 2
    with engine.connect() as conn:
        payloads = [j.payload for j in notification_jobs(conn)]
    states = sorted(p.get("context", p.get("data", {}))["state"] for p in payloads)
    assert states == ["open", "open", "resolved", "resolved"]


def test_no_loop_when_the_alert_webhook_itself_is_down(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Dead `webhook.deliver` jobs to the alert endpoint alert via email and the log only."""
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        dead_jobs(conn, 6, endpoint="oncall", error="ConnectError: refused", fingerprint="fp")
        dead_jobs(conn, 4, endpoint="oncall", error="ConnectError: refused", fingerprint="fp")
        add_breaker(conn, "webhook:oncall", state="open", opened=ago(hours=1))
    settings = env_settings(CHANNELS)
    with caplog.at_level(logging.WARNING, logger="jobdesk.alerts"):
        for minute in range(5):
            run_once(engine, NOW + timedelta(minutes=minute), settings)
    with engine.connect() as conn:
        subjects = sorted((r.rule, r.subject) for r in alert_rows(conn))
        sent = notification_jobs(conn)
    assert subjects == [
        (rules.BREAKER_OPEN, "webhook:oncall"),
        (rules.DEAD_LETTER_SPIKE, "webhook.deliver:oncall"),
        (rules.REPEATED_ERROR, "fp"),
    ]
    # Email only — never through the broken webhook: the spike, the repeated error (the
    # same incident, said so in its message) and the breaker are each notified once.
    assert [j.job_type for j in sent] == ["email.send", "email.send", "email.send"]
    skipped = [r for r in caplog.records if getattr(r, "action", "") == "alert_channel_skipped"]
    assert len(skipped) == 3
    with engine.connect() as conn:
        (repeated,) = alert_rows(conn, rules.REPEATED_ERROR)
        (spike,) = alert_rows(conn, rules.DEAD_LETTER_SPIKE)
    assert repeated.details["related_alert_id"] == spike.id
    assert repeated.notify_key is not None


def test_email_alerts_about_email_go_to_the_webhook_only(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        dead_jobs(conn, 5, job_type="email.send", endpoint=None, fingerprint=None)
        add_breaker(conn, "smtp:default", state="open", opened=ago(hours=1))
    run_once(engine, NOW, env_settings(CHANNELS))
    with engine.connect() as conn:
        sent = notification_jobs(conn)
    assert [j.job_type for j in sent] == ["webhook.deliver", "webhook.deliver"]


def test_unknown_alert_endpoint_is_logged_not_enqueued(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 6, endpoint="crm", fingerprint=None)
    with caplog.at_level(logging.ERROR, logger="jobdesk.alerts"):
        result = run_once(engine, NOW, env_settings({"alert_webhook_endpoint": "nowhere"}))
    assert result.opened == 1
    assert result.notification_jobs == []
    assert "'nowhere' is not configured" in caplog.text


def test_without_channels_alerts_go_to_log_and_table_only(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 6, endpoint="crm", fingerprint=None)
    with caplog.at_level(logging.WARNING, logger="jobdesk.alerts"):
        result = run_once(engine, NOW, Settings())
    assert result.opened == 1
    assert "alert opened: dead_letter_spike webhook.deliver:crm" in caplog.text
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 6


def test_alert_email_template_renders_every_shape() -> None:
    template = load_template(BUILTIN_TEMPLATES, "alert")
    breaker = {
        "rule": "breaker_open",
        "subject": "smtp:default",
        "state": "open",
        "message": "circuit breaker smtp:default open for 11m",
        "count": 7,
        "at": NOW.isoformat(),
        "details": {"breaker": "smtp:default", "error": "ConnectError: refused"},
        "link": "https://jobs.example.com/alerts",
        "links": [{"label": "its jobs", "url": "https://jobs.example.com/jobs?type=email.send"}],
    }
    mail = render(template, breaker)
    assert mail.subject == "[Jobdesk] circuit breaker smtp:default open for 11m"
    assert "its jobs: https://jobs.example.com/jobs?type=email.send" in mail.text
    assert "ConnectError: refused" in mail.text
    assert "https://jobs.example.com/alerts" in mail.text
    resolved = render(template, {**breaker, "state": "resolved", "details": {}})
    assert resolved.subject.startswith("[Jobdesk] Resolved:")
    assert "Matching jobs" not in resolved.text


PEM_BODY = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
#: Errors as a row written by an older version or by plain SQL may hold them: unmasked.
UNMASKED_ERROR = (
    "ValueError: login password=correct horse battery with key -----BEGIN RSA PRIVATE KEY-----"
    f"{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
)
LEAKS = ("horse", "battery", PEM_BODY[:16])


def test_alerts_never_carry_a_secret_of_a_stored_error(engine: sa.Engine) -> None:
    """Issue 23 #5: alert emails and webhooks quote stored errors; a row stored before
    the masking rules knew whole values and PEM keys must not leak through them."""
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        dead_jobs(conn, 6, endpoint="crm", error=UNMASKED_ERROR, fingerprint="fp-login")
        add_breaker(conn, "webhook:crm", state="open", opened=ago(hours=1))
        conn.execute(
            sa.text("UPDATE jobdesk_circuit_breakers SET last_error = :e"),
            {"e": "TLS setup failed: -----BEGIN PRIVATE KEY-----\n" + PEM_BODY},
        )
    run_once(engine, NOW, env_settings(CHANNELS))
    with engine.connect() as conn:
        sent = notification_jobs(conn)
        messages = [row.message for row in alert_rows(conn)]
    assert len(sent) >= 4  # email and webhook for the spike, the repeats and the breaker
    template = load_template(BUILTIN_TEMPLATES, "alert")
    for job in sent:
        document = str(job.payload)
        for leak in LEAKS:
            assert leak not in document, (job.job_type, leak, document)
        if job.job_type == "email.send":
            mail = render(template, job.payload["context"])
            for leak in LEAKS:
                assert leak not in mail.text + mail.subject
    for message in messages:
        for leak in LEAKS:
            assert leak not in message
    assert any("password=***" in message for message in messages)
