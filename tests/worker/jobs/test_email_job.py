"""`email.send` end to end through `drain()` against a real SMTP server, on both DBs."""

from __future__ import annotations

from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import ValidationError, enqueue
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.worker.context import JobContext
from jobdesk.worker.jobs import Recipient, set_mail_provider, set_recipient_resolver
from jobdesk.worker.jobs.config import JobsConfig
from jobdesk.worker.jobs.email import send_email
from jobdesk.worker.jobs.email_provider import SendResult, SmtpProvider, parse_smtp_url
from jobdesk.worker.registry import registry
from jobdesk.worker.testing import drain
from tests.factories import job_row, make_job
from tests.worker.jobs.smtp_server import HangingServer, SmtpSink, free_port

pytestmark = pytest.mark.usefixtures("jobs_env")


def add(engine: sa.Engine, payload: dict[str, Any], **kw: Any) -> int:
    with engine.begin() as conn:
        return enqueue(conn, "email.send", payload, **kw)


def status(engine: sa.Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return job_row(conn, job_id)


WELCOME = {"to": "ana@example.com", "template": "welcome", "event_id": "signup:42"}


def test_welcome_email_is_sent_once_with_a_stable_message_id(
    engine: sa.Engine, smtp: SmtpSink
) -> None:
    job_id = add(engine, {**WELCOME, "context": {"name": "Ana"}})
    result = drain(engine)
    assert result.succeeded == 1
    [mail] = smtp.received
    assert mail.recipients == ["ana@example.com"]
    assert mail.message["Subject"] == "Welcome to Jobdesk, Ana!"
    assert mail.message.is_multipart()  # text + html alternative
    row = status(engine, job_id)
    assert row.status == "succeeded"
    assert row.result["message_id"] == mail.message_id
    assert row.result["template"] == "welcome"
    assert row.result["template_version"] == "1"
    assert len(row.result["content_sha256"]) == 64
    assert row.result["smtp_code"] == 250
    assert row.result["provider_message_id"] == "ABC123"
    assert row.result["dedup_key"] == "email:ana@example.com:welcome:signup:42"
    with engine.connect() as conn:
        stored = conn.execute(sa.select(effects.c.detail)).scalar_one()
    assert stored["message_id"] == mail.message_id

    # The same event enqueued again (no idempotency key): the effect ledger stops it.
    again = add(engine, WELCOME)
    assert drain(engine).succeeded == 1
    assert len(smtp.received) == 1
    assert status(engine, again).result["skipped"] == "already sent"


def test_idempotency_key_is_the_dedup_key(engine: sa.Engine, smtp: SmtpSink) -> None:
    job_id = add(engine, WELCOME, idempotency_key="welcome_email:user:42")
    drain(engine)
    assert status(engine, job_id).result["dedup_key"] == "welcome_email:user:42"
    assert len(smtp.received) == 1


def test_to_user_id_goes_through_the_recipient_resolver(engine: sa.Engine, smtp: SmtpSink) -> None:
    users = {42: Recipient("ana@example.com", {"name": "Ana"})}
    set_recipient_resolver(users.get)
    ok = add(engine, {"to_user_id": 42, "template": "welcome", "event_id": "signup:42"})
    gone = add(engine, {"to_user_id": 7, "template": "welcome", "event_id": "signup:7"})
    drain(engine)
    assert status(engine, ok).result["dedup_key"] == "email:user:42:welcome:signup:42"
    assert smtp.received[0].message["Subject"] == "Welcome to Jobdesk, Ana!"
    dead = status(engine, gone)
    assert dead.status == "dead"
    assert "deleted user" in dead.last_error
    assert dead.attempts == 1


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"template": "welcome"}, "missing email address"),
        ({"to": "not-an-address", "template": "welcome"}, "invalid email address"),
        ({"to": "ana@example.com"}, "payload.template is required"),
        ({"to": "ana@example.com", "template": "nope"}, "unknown email template 'nope'"),
        ({"to": "ana@example.com", "template": "password_reset"}, "needs 'reset_url'"),
        (
            {"to": "ana@example.com", "template": "welcome", "context": {"name": "A\r\nBcc: x@y"}},
            "Subject contains CR, LF or NUL",
        ),
        ({"to": "ana@example.com\r\nBcc: evil@example.com", "template": "welcome"}, "CR, LF"),
        ({"to_user_id": 1, "template": "welcome"}, "needs a recipient resolver"),
    ],
)
def test_bad_requests_go_dead_at_once(
    engine: sa.Engine, smtp: SmtpSink, payload: dict[str, Any], error: str
) -> None:
    # Rows written by plain SQL (or before a check existed) reach the handler whatever
    # enqueue() would have refused; the handler holds the line too.
    with engine.begin() as conn:
        job_id = make_job(conn, job_type="email.send", queue="email", payload=payload)
    drain(engine)
    row = status(engine, job_id)
    assert row.status == "dead"
    assert row.attempts == 1
    assert error in row.last_error
    assert smtp.received == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"template": "welcome"}, "payload.to"),
        ({"to": "not-an-address", "template": "welcome"}, "payload.to"),
        ({"to": "ana@example.com"}, "payload.template"),
        ({"to": "ana@example.com\r\nBcc: evil@example.com", "template": "welcome"}, "payload.to"),
    ],
)
def test_enqueue_refuses_an_email_that_could_never_be_sent(
    engine: sa.Engine, payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        add(engine, payload)
    assert refused.value.field == field


def test_password_reset_renders_its_link(engine: sa.Engine, smtp: SmtpSink) -> None:
    add(
        engine,
        {
            "to": "ana@example.com",
            "template": "password_reset",
            "event_id": "reset:1",
            "context": {"reset_url": "https://app.example.com/reset/abc"},
        },
    )
    drain(engine)
    body = smtp.received[0].message.get_payload()
    assert "https://app.example.com/reset/abc" in str(body)


def test_451_retries_and_then_sends(engine: sa.Engine, smtp: SmtpSink) -> None:
    smtp.set_mode("451")
    job_id = add(engine, WELCOME)
    drain(engine)
    row = status(engine, job_id)
    assert row.status == "failed"
    assert "451" in row.last_error
    smtp.set_mode("ok")
    with engine.connect() as conn:
        later = db_now(conn) + timedelta(hours=3)
    drain(engine, now=later)
    assert status(engine, job_id).status == "succeeded"
    assert len(smtp.received) == 1


def test_550_is_dead_at_once_with_the_reply(engine: sa.Engine, smtp: SmtpSink) -> None:
    smtp.set_mode("550")
    job_id = add(engine, WELCOME)
    drain(engine)
    row = status(engine, job_id)
    assert row.status == "dead"
    assert row.attempts == 1
    assert "550 5.1.1" in row.last_error
    assert "User unknown" in row.last_error


def test_disconnect_after_data_250_counts_as_sent(engine: sa.Engine, smtp: SmtpSink) -> None:
    smtp.set_mode("drop")
    job_id = add(engine, WELCOME)
    drain(engine)
    assert status(engine, job_id).status == "succeeded"
    assert len(smtp.received) == 1


def test_hanging_server_times_out_and_retries(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = HangingServer().start()
    try:
        monkeypatch.setenv("JOBDESK_SMTP_URL", f"smtp://127.0.0.1:{server.port}?timeout=0.3")
        job_id = add(engine, WELCOME)
        drain(engine)
    finally:
        server.stop()
    row = status(engine, job_id)
    assert row.status == "failed"
    assert "timed out" in row.last_error


def test_open_breaker_snoozes_without_burning_attempts(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_SMTP_URL", f"smtp://127.0.0.1:{free_port()}")
    monkeypatch.setenv("JOBDESK_BREAKER_THRESHOLD", "2")
    ids = [add(engine, {**WELCOME, "event_id": f"e{i}"}) for i in range(3)]
    result = drain(engine)
    assert result.failed == 2
    assert result.snoozed == 1
    rows = [status(engine, i) for i in ids]
    assert [r.status for r in rows] == ["failed", "failed", "queued"]
    assert rows[2].attempts == 0


def test_rate_limit_snoozes(
    engine: sa.Engine, smtp: SmtpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_SMTP_RATE_LIMIT", "1/m")
    first = add(engine, {**WELCOME, "event_id": "a"})
    second = add(engine, {**WELCOME, "event_id": "b"})
    result = drain(engine)
    assert result.succeeded == 1
    assert result.snoozed == 1
    assert {status(engine, first).status, status(engine, second).status} == {
        "succeeded",
        "queued",
    }
    assert len(smtp.received) == 1


class CrashAfterSend:
    """The worker 'dies' right after the server's 250, before the effect is recorded."""

    key = "smtp:default"

    def __init__(self, cfg: JobsConfig) -> None:
        self.inner = SmtpProvider(parse_smtp_url(cfg.smtp_url, timeout=2))

    def send(self, message: EmailMessage, *, sender: str, recipients: list[str]) -> SendResult:
        self.inner.send(message, sender=sender, recipients=recipients)
        raise ConnectionAbortedError("worker lost after DATA 250")


def test_crash_between_send_and_record_resends_the_same_message_id(
    engine: sa.Engine, smtp: SmtpSink
) -> None:
    set_mail_provider(CrashAfterSend)
    job_id = add(engine, WELCOME)
    drain(engine)
    assert status(engine, job_id).status == "failed"
    set_mail_provider(None)
    with engine.connect() as conn:
        later = db_now(conn) + timedelta(hours=3)
    drain(engine, now=later)
    assert status(engine, job_id).status == "succeeded"
    ids = [mail.message_id for mail in smtp.received]
    assert len(ids) == 2
    assert len(set(ids)) == 1, "the repeat must carry the same Message-ID"
    # Any further run is stopped by the ledger.
    add(engine, WELCOME)
    drain(engine)
    assert len(smtp.received) == 2


def test_crash_after_record_before_completion_sends_nothing_more(
    engine: sa.Engine, smtp: SmtpSink
) -> None:
    job_id = add(engine, WELCOME)
    with engine.begin() as conn:
        [claimed] = claim(conn, worker_id="doomed", limit=1, lease_seconds=5)
    ctx = JobContext(
        job_id=claimed.id,
        job_type="email.send",
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        idempotency_key=claimed.idempotency_key,
        engine=engine,
    )
    send_email(claimed.payload, ctx)  # the mail goes out and is recorded ...
    # ... and the worker dies before its completion commits: the reaper takes the job back.
    with engine.begin() as conn:
        later = db_now(conn) + timedelta(seconds=30)
        assert rescue_expired(conn, now=later, policy_for=registry.policy_for)
    drain(engine, now=later + timedelta(hours=3))
    row = status(engine, job_id)
    assert row.status == "succeeded"
    assert row.result["skipped"] == "already sent"
    assert len(smtp.received) == 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(effects)).scalar() == 1
        assert conn.execute(sa.select(jobs.c.attempts).where(jobs.c.id == job_id)).scalar() == 2
