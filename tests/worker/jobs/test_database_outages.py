"""The built-in handlers when the database goes away during an attempt: Jobdesk's own
lookups are retried and then snooze the attempt (never counted); the record of a mail
already handed over is never given up — it goes in with the attempt's outcome."""

from __future__ import annotations

import dataclasses
from email.message import EmailMessage
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import find_effect
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.settings import Settings
from jobdesk.worker.completer import apply_outcomes
from jobdesk.worker.executor import Kind, Outcome, execute, execute_async, make_attempt
from jobdesk.worker.jobs import set_mail_provider
from jobdesk.worker.jobs.config import JobsConfig
from jobdesk.worker.jobs.email_provider import SendResult, SmtpProvider, parse_smtp_url
from jobdesk.worker.registry import registry
from tests.asyncdb import on_one_loop
from tests.worker.dbfaults import handler_engine, refusing_connections
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver
from tests.worker.jobs.smtp_server import SmtpSink

pytestmark = [pytest.mark.usefixtures("jobs_env"), pytest.mark.postgresql_only]


def _settings() -> Settings:
    """The test's environment (`jobs_env`) with a short lease: Jobdesk's own database
    work is retried for up to a lease."""
    return dataclasses.replace(Settings.from_env(), lease_seconds=1.0)


def _claimed(engine: sa.Engine, job_type: str, payload: dict[str, Any]) -> ClaimedJob:
    with engine.begin() as conn:
        enqueue(conn, job_type, payload)
        (claimed,) = claim(conn, worker_id="w", limit=1, now=db_now(conn), lease_seconds=30)
    return claimed


def _run(db_url: str, claimed: ClaimedJob) -> Outcome:
    job_type = registry.get(claimed.job_type)
    assert job_type is not None
    settings = _settings()
    handlers = handler_engine(db_url, settings)
    try:
        attempt = make_attempt(claimed, job_type, handlers, settings)
        attempt.begin()
        clock = lambda: claimed.started_at  # noqa: E731
        if job_type.is_async:  # webhook.deliver
            return on_one_loop(lambda: execute_async(claimed, job_type, attempt.ctx, clock=clock))
        return execute(claimed, job_type, attempt.ctx, clock=clock)
    finally:
        handlers.dispose()


def _settle(engine: sa.Engine, outcome: Outcome) -> None:
    with engine.begin() as conn:
        apply_outcomes(conn, [outcome], now=db_now(conn), policy_for=registry.policy_for)


def _counted(engine: sa.Engine, job_id: int) -> tuple[str, int, int]:
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
        attempts = conn.execute(
            sa.select(sa.func.count()).where(job_attempts.c.job_id == job_id)
        ).scalar_one()
    return row.status, row.attempts, attempts


def test_a_mail_handed_over_before_the_database_left_is_recorded_with_the_outcome(
    engine: sa.Engine, db_url: str, smtp: SmtpSink
) -> None:
    outages: list[Any] = []

    class SendThenLoseTheDatabase:
        key = "smtp"

        def __init__(self, cfg: JobsConfig) -> None:
            self.smtp = SmtpProvider(parse_smtp_url(cfg.smtp_url, timeout=2))

        def send(self, message: EmailMessage, *, sender: str, recipients: list[str]) -> SendResult:
            result = self.smtp.send(message, sender=sender, recipients=recipients)
            outage = refusing_connections(db_url)
            outage.__enter__()
            outages.append(outage)
            return result

    set_mail_provider(SendThenLoseTheDatabase)
    payload = {"to": "ana@example.com", "template": "welcome", "event_id": "signup:7"}
    claimed = _claimed(engine, "email.send", payload)
    try:
        outcome = _run(db_url, claimed)
    finally:
        for outage in outages:
            outage.__exit__(None, None, None)
    assert len(smtp.received) == 1
    assert outcome.kind is Kind.SUCCEEDED
    assert len(outcome.writes) == 1  # the effect record, deferred to the outcome
    _settle(engine, outcome)
    with engine.connect() as conn:
        done = find_effect(conn, "email:ana@example.com:welcome:signup:7")
    assert done is not None
    assert done["message_id"] == smtp.received[0].message_id
    assert _counted(engine, claimed.id) == ("succeeded", 1, 1)


def test_a_webhook_whose_lookups_find_no_database_is_snoozed_not_failed(
    engine: sa.Engine, db_url: str
) -> None:
    receiver = Receiver().start()
    try:
        receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/hook")))
        claimed = _claimed(
            engine, "webhook.deliver", {"endpoint": "crm", "event": "e", "data": {"n": 1}}
        )
        with refusing_connections(db_url):
            outcome = _run(db_url, claimed)
        assert outcome.kind is Kind.SNOOZED
        assert outcome.error is not None
        assert outcome.error.startswith("database unavailable during webhook.deliver lookups")
        assert receiver.ids_seen() == []
        _settle(engine, outcome)
        assert _counted(engine, claimed.id) == ("queued", 0, 0)
    finally:
        receiver.stop()
