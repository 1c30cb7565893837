"""`webhook.deliver` with per-delivery secret headers (`secrets={"header.Authorization":
…}`): sent with the signed request, stored only sealed, never in an error, a log line or
the delivery record; names and values that would forge or split the request are refused
(the job ends dead naming the secret, not its value). Both databases."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import enqueue
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.webhooks.models import webhook_deliveries
from jobdesk.shared.webhooks.secret_headers import SecretHeaderError, secret_headers
from jobdesk.worker.testing import drain
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver

pytestmark = pytest.mark.usefixtures("jobs_env")

EVENT = {"endpoint": "crm", "event": "user.created", "data": {"user_id": 42}}
TOKEN = "Bearer s3cr3t-crm-token"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", Fernet.generate_key().decode())


def test_a_secret_header_is_sent_and_never_written_in_clear(
    engine: sa.Engine, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/ok")))
    with engine.begin() as conn:
        enqueue(
            conn,
            "webhook.deliver",
            EVENT,
            secrets={"header.Authorization": TOKEN, "header.X-Tenant-Key": "t-42"},
        )
        enqueue(conn, "webhook.deliver", {**EVENT, "event": "user.updated"})
    with caplog.at_level(logging.DEBUG):
        assert drain(engine).succeeded == 2
    by_event = {s.body.count(b"user.created"): s for s in receiver.seen}
    sent, other = by_event[1], by_event[0]
    assert sent.verified
    assert sent.headers["authorization"] == TOKEN
    assert sent.headers["x-tenant-key"] == "t-42"
    assert "authorization" not in other.headers  # another job's secrets are its own
    assert TOKEN not in caplog.text
    with engine.connect() as conn:
        stored = " ".join(
            str(row)
            for table in (jobs, job_attempts, webhook_deliveries)
            for row in conn.execute(sa.select(table))
        )
    assert "s3cr3t" not in stored


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("header.Webhook-Signature", "v1,forged", "would replace a header the delivery sets"),
        ("header.Content-Type", "text/plain", "would replace a header the delivery sets"),
        ("header.X-Ok", "a\r\nX-Injected: 1", "holds a line break in its value"),
    ],
)
def test_headers_that_would_forge_or_split_the_request_are_refused(
    engine: sa.Engine, receiver: Receiver, name: str, value: str, says: str
) -> None:
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/ok")))
    with engine.begin() as conn:
        job_id = enqueue(conn, "webhook.deliver", EVENT, secrets={name: value})
    drain(engine)
    with engine.connect() as conn:
        status, error = conn.execute(
            sa.select(jobs.c.status, jobs.c.last_error).where(jobs.c.id == job_id)
        ).one()
    assert status == "dead"
    assert f"secret {name!r} {says}" in error
    assert value not in error
    assert receiver.seen == []  # nothing was sent


def test_secret_headers_reads_only_header_secrets() -> None:
    assert secret_headers({"api_token": "x", "header.X-Api-Key": "k"}) == {"X-Api-Key": "k"}
    with pytest.raises(SecretHeaderError, match="does not name an HTTP header"):
        secret_headers({"header.Bad Name": "v"})
