"""A job's secrets on its page: their names and count for everyone, the values for no
one — except an admin who reveals one, which the audit log records; an operator or
viewer cannot reveal, and the answer is never cached."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import enqueue
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import Browser

KEY = Fernet.generate_key().decode()
TOKEN = "ya29.refresh-token-of-ana"


@pytest.fixture
def settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", KEY)  # the app's enqueue side
    return replace(settings, encryption_keys=KEY)


@pytest.fixture
def job_id(engine: sa.Engine, settings: Settings) -> int:
    with engine.begin() as conn:
        return enqueue(
            conn, "crm.sync", {"account": 42}, secrets={"refresh_token": TOKEN, "api_key": "k-1"}
        )


def test_every_role_sees_how_many_and_which_never_the_values(
    viewer: Browser, operator: Browser, admin: Browser, job_id: int
) -> None:
    for browser in (viewer, operator, admin):
        html = browser.get(f"/jobs/{job_id}").get_data(as_text=True)
        assert "2 secrets (encrypted)" in html
        assert '<span class="mono">api_key</span>, <span class="mono">refresh_token</span>' in html
        assert TOKEN not in html
    assert "Reveal refresh_token" not in viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Reveal refresh_token" not in operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Reveal refresh_token" in admin.get(f"/jobs/{job_id}").get_data(as_text=True)


def test_an_admin_reveals_one_and_the_audit_log_says_who(
    admin: Browser, operator: Browser, engine: sa.Engine, job_id: int
) -> None:
    url = f"/jobs/{job_id}/secrets/refresh_token/reveal"
    assert operator.post(url).status_code == 403
    answer = admin.post(url, {"reason": "CRM support ticket 77"})
    assert answer.status_code == 200
    assert TOKEN in answer.get_data(as_text=True)
    assert answer.headers["Cache-Control"] == "no-store"
    with engine.connect() as conn:
        rows = list(conn.execute(sa.select(audit_log).where(audit_log.c.action == "secret.reveal")))
    assert [(r.actor, r.job_id, r.subject, r.reason) for r in rows] == [
        ("ada", job_id, "secret refresh_token", "CRM support ticket 77")
    ]
    missing = admin.post(f"/jobs/{job_id}/secrets/nope/reveal")
    assert missing.status_code == 303
    assert f"Not revealed: job {job_id} has no secret" in admin.get(f"/jobs/{job_id}").get_data(
        as_text=True
    ).replace("&#39;", "'")
    audit_page = admin.get("/audit").get_data(as_text=True)
    assert "secret refresh_token" in audit_page
    assert TOKEN not in audit_page


def test_a_dashboard_without_the_key_says_so_and_audits_nothing(
    admin: Browser, app: object, engine: sa.Engine, job_id: int
) -> None:
    state = app.extensions["jobdesk"]  # type: ignore[attr-defined]
    state.settings = replace(state.settings, encryption_keys=None)
    answer = admin.post(f"/jobs/{job_id}/secrets/api_key/reveal")
    assert answer.status_code == 303
    page = admin.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Not revealed: JOBDESK_ENCRYPTION_KEYS is not set" in page
    with engine.connect() as conn:
        reveals = sa.select(sa.func.count()).where(audit_log.c.action == "secret.reveal")
        assert conn.execute(reveals).scalar_one() == 0
