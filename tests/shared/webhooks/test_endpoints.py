"""Webhook endpoints in `jobdesk.shared.webhooks.endpoints` and the `jobdesk endpoints` commands."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.webhooks.endpoints import (
    add_endpoint,
    get_endpoint,
    list_endpoints,
    pause_endpoint,
    resume_endpoint,
    rotate_secret,
)
from jobdesk.shared.webhooks.signing import secret_key


def test_add_get_list_and_secrets_stay_private(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        secret = add_endpoint(conn, "crm", "http://127.0.0.1:9/hook", allow_private=True, now=now)
        with pytest.raises(ConflictError, match="already exists"):
            add_endpoint(conn, "crm", "http://127.0.0.1:9/x", allow_private=True, now=now)
        with pytest.raises(ValidationError, match="endpoint"):
            add_endpoint(conn, "Bad Name!", "http://127.0.0.1/", allow_private=True, now=now)
    assert len(secret_key(secret)) >= 24
    with engine.connect() as conn:
        endpoint = get_endpoint(conn, "crm")
        assert [e.name for e in list_endpoints(conn)] == ["crm"]
    assert endpoint is not None
    assert secret not in repr(endpoint)
    assert secret not in str(endpoint.public(now))
    assert endpoint.signing_secrets(now) == [secret]


def test_pause_until_ends_by_itself_and_reasons_are_bounded(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        add_endpoint(conn, "crm", "http://127.0.0.1:9/", allow_private=True, now=now)
        with pytest.raises(ValidationError, match="reason"):
            pause_endpoint(conn, "crm", actor="ops", reason="x" * 3000, now=now)
        # Every pause needs a reason (queues and schedules too); a resume may give one.
        for missing in (None, "", "   "):
            with pytest.raises(ValidationError, match="reason"):
                pause_endpoint(conn, "crm", actor="ops", reason=missing, now=now)
        with pytest.raises(ValidationError, match="until"):
            pause_endpoint(conn, "crm", actor="ops", reason="deploy", until=now, now=now)
        with pytest.raises(NotFoundError):
            pause_endpoint(conn, "nope", actor="ops", reason="deploy", now=now)
        pause_endpoint(
            conn, "crm", actor="ops", reason="deploy", until=now + timedelta(minutes=5), now=now
        )
        endpoint = get_endpoint(conn, "crm")
    assert endpoint is not None
    assert endpoint.is_paused(now)
    assert not endpoint.is_paused(now + timedelta(minutes=6))


def test_rotation_keeps_the_old_secret_for_the_overlap_only(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        old = add_endpoint(conn, "crm", "http://127.0.0.1:9/", allow_private=True, now=now)
        new = rotate_secret(conn, "crm", overlap=timedelta(hours=1), now=now)
        endpoint = get_endpoint(conn, "crm")
        actions = conn.execute(sa.select(audit_log.c.action)).scalars().all()
    assert endpoint is not None
    assert endpoint.signing_secrets(now) == [new, old]
    assert endpoint.signing_secrets(now + timedelta(hours=2)) == [new]
    assert "endpoint.rotate_secret" in actions
    assert all(old not in str(a) and new not in str(a) for a in actions)


def test_resume_of_an_unknown_endpoint_is_a_clear_error(engine: sa.Engine) -> None:
    with engine.begin() as conn, pytest.raises(NotFoundError, match="no webhook endpoint"):
        resume_endpoint(conn, "nope", actor="ops", now=db_now(conn))


def test_cli_add_prints_the_secret_last_and_manages_the_endpoint(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_DATABASE_URL", db_url)
    runner = CliRunner()

    refused = runner.invoke(cli, ["endpoints", "add", "crm", "http://127.0.0.1:9/hook"])
    assert refused.exit_code == 1
    assert "loopback" in refused.output
    assert "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS=1" in refused.output
    assert len(refused.output.strip().splitlines()) == 1

    monkeypatch.setenv("JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS", "1")
    added = runner.invoke(cli, ["endpoints", "add", "crm", "http://127.0.0.1:9/hook"])
    assert added.exit_code == 0, added.output
    secret = added.output.strip().splitlines()[-1]
    assert secret.startswith("whsec_")
    assert len(secret_key(secret)) >= 24

    paused = runner.invoke(cli, ["endpoints", "pause", "crm", "--reason", "CRM down"])
    assert paused.exit_code == 0, paused.output
    listing = runner.invoke(cli, ["endpoints", "list"])
    assert "paused" in listing.output
    assert "CRM down" in listing.output
    assert secret not in listing.output
    as_json = runner.invoke(cli, ["endpoints", "list", "--json"])
    assert '"paused": true' in as_json.output

    no_reason = runner.invoke(cli, ["endpoints", "pause", "crm"])
    assert no_reason.exit_code == 2
    assert "Missing option '--reason'" in no_reason.output

    resumed = runner.invoke(cli, ["endpoints", "resume", "crm", "--reason", "CRM is back"])
    assert "resumed; 0 held job(s) released" in resumed.output
    rotated = runner.invoke(cli, ["endpoints", "rotate", "crm", "--overlap-hours", "2"])
    new_secret = rotated.output.strip().splitlines()[-1]
    assert new_secret.startswith("whsec_")
    assert new_secret != secret

    missing = runner.invoke(cli, ["endpoints", "pause", "nope", "--reason", "CRM down"])
    assert missing.exit_code == 1
    assert "no webhook endpoint named 'nope'" in missing.output
