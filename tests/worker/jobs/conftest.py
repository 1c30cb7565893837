"""Fixtures for the built-in job types: a real SMTP server, a real webhook receiver and
the environment the handlers read (`JOBDESK_*`), with short timeouts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobdesk.worker.jobs  # noqa: F401  (registers the built-in types)
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.webhooks.endpoints import add_endpoint
from jobdesk.worker.jobs import set_data_resolver, set_mail_provider, set_recipient_resolver
from tests.worker.jobs.receiver import Receiver
from tests.worker.jobs.smtp_server import SmtpSink


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink().start()
    yield sink
    sink.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def jobs_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, smtp: SmtpSink
) -> Iterator[dict[str, str]]:
    env = {
        "JOBDESK_SMTP_URL": f"{smtp.url}?timeout=2",
        "JOBDESK_MAIL_FROM": "jobdesk@example.com",
        "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "1",
        "JOBDESK_WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1",
        "JOBDESK_WEBHOOK_TIMEOUT_SECONDS": "1",
        "JOBDESK_SMTP_RATE_LIMIT": "1000/s",
        "JOBDESK_WEBHOOK_RATE_LIMIT": "1000/s",
        "JOBDESK_BREAKER_THRESHOLD": "50",
        "JOBDESK_REPORTS_DIR": str(tmp_path / "reports"),
        "JOBDESK_PAUSED_RECHECK_SECONDS": "60",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield env
    set_recipient_resolver(None)
    set_data_resolver(None)
    set_mail_provider(None)


def add_test_endpoint(engine: sa.Engine, name: str, url: str) -> str:
    with engine.begin() as conn:
        return add_endpoint(conn, name, url, allow_private=True, now=db_now(conn))
