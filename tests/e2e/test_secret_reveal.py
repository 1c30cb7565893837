"""Job secrets in the browser: everyone sees how many and which, only an admin may
reveal one, the value shows on a page of its own, and the audit log names who did it."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import enqueue
from tests.e2e.conftest import Seeded
from tests.e2e.test_operator_stories import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

Server = tuple[str, Seeded]
TOKEN = "ya29.refresh-token-of-ana"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", Fernet.generate_key().decode())


def test_an_admin_reveals_a_secret_and_the_audit_log_says_so(
    page: Any, browser: Any, live_server: Server, engine: sa.Engine
) -> None:
    base, _ = live_server
    with engine.begin() as conn:
        job_id = enqueue(conn, "crm.sync", {"account": 42}, secrets={"refresh_token": TOKEN})

    viewer = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    log_in(viewer, base, "vic")
    viewer.goto(f"{base}/jobs/{job_id}")
    assert "1 secret (encrypted): refresh_token" in viewer.locator("dl.facts").inner_text()
    assert viewer.get_by_role("button", name="Reveal refresh_token").count() == 0
    assert TOKEN not in viewer.content()
    viewer.context.close()

    log_in(page, base, "ada")
    page.goto(f"{base}/jobs/{job_id}")
    assert TOKEN not in page.content()
    page.get_by_label("Reason for revealing refresh_token").fill("CRM ticket 77")
    page.get_by_role("button", name="Reveal refresh_token").click()
    page.wait_for_url(f"{base}/jobs/{job_id}/secrets/refresh_token/reveal")
    assert page.locator("#secret-value").inner_text() == TOKEN
    page.goto(f"{base}/audit")
    row = page.locator("tr", has_text="secret.reveal")
    assert "ada" in row.inner_text()
    assert "secret refresh_token" in row.inner_text()
    assert "CRM ticket 77" in row.inner_text()
    assert TOKEN not in page.content()
