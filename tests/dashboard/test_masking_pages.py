"""Secrets and emails stay masked on every page and in every link (issue 12 #12, B15)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import unquote

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.webhooks.endpoints import add_endpoint, disable_endpoint, set_endpoint_url
from jobdesk.shared.webhooks.models import webhook_endpoints
from tests.dashboard.conftest import browser_for, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

TOKEN = "s3cr3t-t0ken-value"
URL = f"http://127.0.0.1:9/in?token={TOKEN}"
EMAIL = "ana.lopez@example.com"
_HREF = re.compile(r'href="([^"]*)"')


@pytest.fixture
def gone_endpoint(engine: sa.Engine) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        add_endpoint(conn, "crm", URL, allow_private=True, now=now)
        # What the webhook handler records on a 410.
        disable_endpoint(conn, "crm", reason=f"410 Gone from {URL}", now=now)


@pytest.mark.parametrize("role", ["vera", "otto", "ada"])
def test_endpoint_urls_and_disable_reasons_never_show_the_token(
    app: Flask, users: None, gone_endpoint: None, role: str
) -> None:
    browser = browser_for(app, role)
    for url in ("/endpoints", "/audit"):
        html = browser.get(url).get_data(as_text=True)
        assert TOKEN not in html, (role, url)
    endpoints = browser.get("/endpoints").get_data(as_text=True)
    assert "token=***" in endpoints
    assert "410 Gone from http://127.0.0.1:9/in?token=***" in endpoints


def test_the_token_is_masked_before_storage(engine: sa.Engine, gone_endpoint: None) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        set_endpoint_url(
            conn,
            "crm",
            "http://127.0.0.1:9/v2?token=another-secret-1",
            allow_private=True,
            now=now,
        )
    with engine.connect() as conn:
        stored = conn.execute(
            sa.select(webhook_endpoints.c.paused_reason, webhook_endpoints.c.disabled_reason)
        ).one()
        audit = [str(row) for row in conn.execute(sa.select(audit_log))]
    assert TOKEN not in str(stored)
    assert not [row for row in audit if TOKEN in row or "another-secret-1" in row]


def test_links_never_carry_what_the_page_masks(app: Flask, engine: sa.Engine, users: None) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, idempotency_key=f"welcome:{EMAIL}", group_key=f"user:{EMAIL}")
        other = dead_job(conn, idempotency_key="welcome:plain-key", group_key="account-7")
    viewer = browser_for(app, "vera")
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    hrefs = [unquote(href) for href in _HREF.findall(page)]
    assert not [href for href in hrefs if "ana.lopez" in href], hrefs
    assert EMAIL not in page
    # The viewer's links still find the jobs sharing the key, by reference.
    for kind in ("group_of", "key_of"):
        listed = viewer.get(f"/jobs?{kind}={job_id}").get_data(as_text=True)
        assert f"/jobs/{job_id}" in listed
        assert f"/jobs/{other}" not in listed
        assert EMAIL not in listed
    assert f"/jobs?group_of={job_id}" in page
    assert f"/jobs?key_of={job_id}" in page
    # Keys with nothing to mask keep their readable, bookmarkable links.
    plain = viewer.get(f"/jobs/{other}").get_data(as_text=True)
    assert "/jobs?group=account-7" in plain
    # Operators see emails, so their links may carry them.
    operator = browser_for(app, "otto").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "/jobs?group=user:ana.lopez@example.com" in operator


def test_a_secret_in_a_key_is_not_linked_for_anyone(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, idempotency_key=f"sync?token={TOKEN}")
    for role in ("vera", "ada"):
        page = browser_for(app, role).get(f"/jobs/{job_id}").get_data(as_text=True)
        assert TOKEN not in page, role
        assert f"/jobs?key_of={job_id}" in page
