"""Security checklist: CSRF + Origin, headers, inert rendering of hostile job data,
masking for viewers."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.shared.core.models import job_attempts
from tests.dashboard.conftest import Browser, dead_job
from tests.factories import job_row, make_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

XSS = "<img src=x onerror=alert(1)>\"'<script>alert(2)</script>"


def test_post_without_csrf_token_is_refused(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.client.post(
        f"/jobs/{job_id}/retry", data={}, headers={"Origin": "http://localhost"}
    )
    assert response.status_code == 403
    assert "security token is missing" in response.get_data(as_text=True)
    wrong = operator.client.post(f"/jobs/{job_id}/retry", data={"csrf_token": "forged"})
    assert wrong.status_code == 403
    with engine.connect() as conn:
        assert job_row(conn, job_id).resolution is None


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_post_from_another_site_is_refused_even_with_the_token(
    operator: Browser, engine: sa.Engine, headers: dict[str, str]
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.client.post(
        f"/jobs/{job_id}/retry", data={"csrf_token": operator.token}, headers=headers
    )
    assert response.status_code == 403
    assert "another site" in response.get_data(as_text=True)


def test_htmx_header_token_is_accepted(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.client.post(
        f"/jobs/{job_id}/retry",
        headers={
            "X-CSRF-Token": operator.token,
            "HX-Request": "true",
            "Sec-Fetch-Site": "same-origin",
        },
    )
    assert response.status_code == 303


def test_login_itself_needs_the_token(app: Flask, users: None) -> None:
    client = app.test_client()
    response = client.post("/login", data={"username": "otto", "password": "x" * 12})
    assert response.status_code == 403


def test_security_headers_on_pages_and_static(viewer: Browser) -> None:
    page = viewer.get("/jobs")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "'unsafe-inline'" not in csp
    assert "'unsafe-eval'" not in csp
    assert "frame-ancestors 'none'" in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Referrer-Policy"] == "same-origin"
    assert page.headers["Cache-Control"] == "no-store"
    html = page.get_data(as_text=True)
    assert "<script>" not in html
    assert " style=" not in html
    assert '"selfRequestsOnly": true' in html
    assert '"allowEval": false' in html
    static = viewer.get("/static/vendor/htmx-2.0.11.min.js")
    assert static.status_code == 200
    assert "max-age" in static.headers["Cache-Control"]
    static.close()


def test_hostile_job_data_renders_inert(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = dead_job(
            conn,
            job_type=XSS[:100],
            queue="q<b>x</b>",
            group_key=XSS,
            idempotency_key=XSS,
            last_error=f"boom {XSS}\x1b[31m\u202e evil",
            payload={"html": XSS, XSS: "key"},
        )
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=job_id, attempt=1, outcome="failed", error=f"{XSS}\x07bell"
            )
        )
    operator.post(f"/jobs/{job_id}/ignore", {"reason": XSS})
    pages = [
        f"/jobs/{job_id}",
        "/jobs",
        "/jobs?status=dead",
        "/dead",
        "/audit",
        "/",
        f"/jobs?group={XSS[:50]}",
    ]
    for url in pages:
        html = operator.get(url).get_data(as_text=True)
        assert "<img src=x" not in html, url
        assert "<script>alert" not in html, url
        assert "<b>x</b>" not in html, url
    detail = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "&lt;img src=x onerror=alert(1)&gt;" in detail
    assert "\\x1b[31m" in detail
    assert "\\u202e" in detail
    assert "\\x07bell" in detail
    assert "\x1b" not in detail


def test_viewers_see_masked_emails_operators_see_them(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    from tests.dashboard.conftest import browser_for

    with engine.begin() as conn:
        job_id = make_job(
            conn,
            job_type="email.send",
            status="dead",
            payload={
                "to": "ana.lopez@example.com",
                "api_key": "sk_live_123456",
                "template": "welcome",
            },
            last_error="550 mailbox ana.lopez@example.com unavailable",
        )
    viewer = browser_for(app, "vera").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "ana.lopez@example.com" not in viewer
    assert "a***@example.com" in viewer
    assert "sk_live_123456" not in viewer
    operator = browser_for(app, "otto").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "ana.lopez@example.com" in operator
    assert "sk_live_123456" not in operator


def test_payload_pages_turn_off_the_htmx_history_cache(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    for url in (f"/jobs/{job_id}", f"/jobs/{job_id}/fix", "/dead"):
        assert 'hx-history="false"' in operator.get(url).get_data(as_text=True), url


def test_bulk_preview_cancel_link_only_goes_to_dashboard_pages(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    html = operator.get(f"/dead/bulk?action=retry&ids={job_id}&next=javascript:alert(1)").get_data(
        as_text=True
    )
    assert "javascript:" not in html
    assert 'href="/dead">Cancel' in html
