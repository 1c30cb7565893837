"""Who gets in and what they may do: fail closed, roles on every route, login hygiene."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import create_app
from jobdesk.dashboard.app import SecretKeyError, check_secret_key
from jobdesk.dashboard.auth import ROLE_ATTRIBUTE
from jobdesk.shared.operator.commands.accounts import set_disabled, set_password
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import PASSWORD, Browser, add_user, browser_for, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

#: The minimum role of every dashboard route; a new route must be added here.
EXPECTED_ROLES = {
    "jobdesk.overview.index": "viewer",
    "jobdesk.jobs.index": "viewer",
    "jobdesk.jobs.detail": "viewer",
    "jobdesk.jobs.status": "viewer",
    "jobdesk.jobs.news": "viewer",
    "jobdesk.jobs.progress": "viewer",
    "jobdesk.jobs.raw_document": "operator",
    "jobdesk.batches.index": "viewer",
    "jobdesk.batches.detail": "viewer",
    "jobdesk.batches.cancel": "operator",
    "jobdesk.dead.index": "viewer",
    "jobdesk.dead.news": "viewer",
    "jobdesk.dead.bulk_preview": "operator",
    "jobdesk.redrives.index": "viewer",
    "jobdesk.redrives.detail": "viewer",
    "jobdesk.redrives.new": "operator",
    "jobdesk.redrives.start": "operator",
    "jobdesk.redrives.pause": "operator",
    "jobdesk.redrives.resume": "operator",
    "jobdesk.redrives.cancel": "operator",
    "jobdesk.history.index": "viewer",
    "jobdesk.actions.retry": "operator",
    "jobdesk.secrets.reveal": "admin",
    "jobdesk.actions.ignore": "operator",
    "jobdesk.actions.cancel_job": "operator",
    "jobdesk.actions.cancel_preview": "operator",
    "jobdesk.actions.cancel_matching": "operator",
    "jobdesk.actions.fix_form": "operator",
    "jobdesk.actions.fix": "operator",
    "jobdesk.actions.bulk": "operator",
    "jobdesk.audit.index": "viewer",
    "jobdesk.alerts.index": "viewer",
    "jobdesk.alerts.news": "viewer",
    "jobdesk.alerts.acknowledge": "operator",
    "jobdesk.endpoints.index": "viewer",
    "jobdesk.endpoints.pause": "admin",
    "jobdesk.endpoints.resume": "admin",
    "jobdesk.endpoints.close": "admin",
    "jobdesk.queues.index": "viewer",
    "jobdesk.queues.pause": "operator",
    "jobdesk.queues.resume": "operator",
    "jobdesk.holds.index": "viewer",
    "jobdesk.holds.preview": "operator",
    "jobdesk.holds.place": "operator",
    "jobdesk.holds.release": "operator",
    "jobdesk.schedules.index": "viewer",
    "jobdesk.schedules.pause_schedule": "operator",
    "jobdesk.schedules.resume_schedule": "operator",
    "jobdesk.schedules.run_schedule": "operator",
    "jobdesk.workers.index": "viewer",
    "jobdesk.operators.index": "admin",
    "jobdesk.operators.add": "admin",
    "jobdesk.operators.change_role": "admin",
    "jobdesk.operators.disable": "admin",
    "jobdesk.operators.enable": "admin",
    "jobdesk.operators.reset_password": "admin",
    "jobdesk.settings.index": "viewer",
    "jobdesk.settings.save": "viewer",
    "jobdesk.health.healthz": "public",
    "jobdesk.health.readyz": "public",
    "metrics.metrics": "public",  # its own bearer-token / loopback check
    "jobdesk.login.login": "public",
    "jobdesk.login.login_submit": "public",
    "jobdesk.login.logout": "viewer",
}
GET_PAGES = [
    "/",
    "/jobs",
    "/jobs/1",
    "/jobs/1/status",
    "/jobs/news?newer_than=1&shown=1",
    "/jobs/progress?from_audit=1",
    "/dead",
    "/dead/news?seen_at=2026-01-01T00:00:00",
    "/history",
    "/audit",
    "/alerts",
    "/alerts/news?newer_than=1",
    "/endpoints",
    "/queues",
    "/holds",
    "/schedules",
    "/workers",
    "/batches",
    "/redrives",
]
OPERATOR_GETS = [
    "/jobs/1/fix",
    "/dead/bulk?action=retry&ids=1",
    "/jobs/1/payload.json",
    "/jobs/cancel?status=queued",
    "/holds/preview?match=concurrency_key&value=tenant:42&reason=x",
    "/redrives/new?type=webhook.deliver",
]
ADMIN_GETS = ["/operators"]
POSTS = {
    "/jobs/1/retry": {},
    "/jobs/1/ignore": {"reason": "x"},
    "/jobs/1/cancel": {"reason": "x"},
    "/jobs/cancel": {"status": "queued", "reason": "x", "low": "1", "high": "1"},
    "/jobs/1/fix": {"payload": "{}"},
    "/dead/bulk": {"action": "retry", "ids": "1"},
    "/redrives": {
        "type": "webhook.deliver",
        "rate": "60",
        "stop_failures": "5",
        "stop_window": "20",
        "reason": "x",
    },
    "/redrives/1/pause": {"reason": "x"},
    "/redrives/1/resume": {},
    "/redrives/1/cancel": {"reason": "x"},
    "/alerts/1/acknowledge": {"note": "x"},
    "/endpoints/crm/pause": {"reason": "x"},
    "/endpoints/crm/resume": {},
    "/breakers/close": {"key": "webhook:crm"},
    "/queues/webhooks/pause": {"reason": "x"},
    "/queues/webhooks/resume": {},
    "/holds": {"match": "concurrency_key", "value": "tenant:42", "reason": "x"},
    "/holds/1/release": {},
    "/schedules/nightly/pause": {"reason": "x"},
    "/schedules/nightly/resume": {},
    "/schedules/nightly/run": {},
    "/operators": {"username": "newbie", "role": "viewer", "password": "a long first password"},
    "/operators/vera/role": {"role": "operator"},
    "/operators/otto/disable": {},
    "/operators/otto/enable": {},
    "/operators/vera/password": {"password": "a long new password"},
}
ADMIN_POSTS = {
    "/endpoints/crm/pause",
    "/endpoints/crm/resume",
    "/breakers/close",
    *(url for url in POSTS if url.startswith("/operators")),
}


def _rules(app: Flask) -> dict[str, str]:
    return {
        rule.endpoint: getattr(app.view_functions[rule.endpoint], ROLE_ATTRIBUTE, "MISSING")
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "jobdesk.static"
    }


def test_every_route_declares_the_expected_role(app: Flask) -> None:
    assert _rules(app) == EXPECTED_ROLES


def test_everything_is_closed_before_an_operator_exists(app: Flask, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_job(conn)
    browser = Browser(app.test_client())
    for url in GET_PAGES + OPERATOR_GETS + ADMIN_GETS:
        response = browser.get(url)
        assert response.status_code == 303, url
        assert response.headers["Location"].startswith("/login?next=")
    for url, data in POSTS.items():
        assert browser.post(url, data).status_code == 401, url
    assert browser.get("/jobs", headers={"HX-Request": "true"}).status_code == 401
    login = browser.get("/login")
    text = login.get_data(as_text=True)
    assert "No operator account exists yet" in text
    assert "jobdesk users add" in text
    assert "<form" not in text.split("</header>")[1]
    refused = browser.post("/login", {"username": "root", "password": "anything at all"})
    assert refused.status_code == 401
    assert browser.get("/healthz").status_code == 200


def test_htmx_requests_are_redirected_to_login_with_a_header(app: Flask, users: None) -> None:
    response = Browser(app.test_client()).get("/", headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert response.headers["HX-Redirect"].startswith("/login")


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_roles_are_enforced_server_side(
    app: Flask, engine: sa.Engine, users: None, role: str
) -> None:
    with engine.begin() as conn:
        dead_job(conn)
    browser = browser_for(app, {"viewer": "vera", "operator": "otto", "admin": "ada"}[role])
    for url in GET_PAGES:
        assert browser.get(url).status_code in (200, 286), url
    for url in OPERATOR_GETS:
        expected = 403 if role == "viewer" else 200
        assert browser.get(url).status_code == expected, url
    for url in ADMIN_GETS:
        expected = 200 if role == "admin" else 403
        assert browser.get(url).status_code == expected, url
    for url, data in POSTS.items():
        needed = "admin" if url in ADMIN_POSTS else "operator"
        allowed = role == "admin" or (role == "operator" and needed == "operator")
        status = browser.post(url, data).status_code
        if allowed:
            assert status == 303, (url, status)
        else:
            assert status == 403, (url, status)


def test_viewer_sees_no_action_buttons(app: Flask, engine: sa.Engine, users: None) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    viewer = browser_for(app, "vera")
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Retry as a new job" not in page
    assert "Retry all" not in viewer.get("/dead").get_data(as_text=True)


def test_login_rotates_the_session_and_logout_ends_it(app: Flask, users: None) -> None:
    browser = Browser(app.test_client())
    browser.get("/login")
    before = browser.token
    with browser.client.session_transaction() as session:
        session["planted"] = "by an attacker"
    response = browser.post("/login", {"username": "otto", "password": PASSWORD, "next": "/dead"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/dead"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Secure" not in cookie
    with browser.client.session_transaction() as session:
        assert "planted" not in session
        assert session["csrf"] != before
    browser.get("/")
    assert browser.post("/logout").status_code == 303
    assert browser.get("/").status_code == 303


def test_cookie_is_secure_over_tls(app: Flask, users: None) -> None:
    client = app.test_client()
    browser = Browser(client)
    browser.get("/login", base_url="https://localhost")
    response = client.post(
        "/login",
        data={"csrf_token": browser.token, "username": "otto", "password": PASSWORD},
        base_url="https://localhost",
        headers={"Origin": "https://localhost"},
    )
    assert response.status_code == 303
    assert "Secure" in response.headers["Set-Cookie"]


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "javascript:x",
        "/jobs\r\nX: y",
    ],
)
def test_next_only_goes_to_dashboard_pages(app: Flask, users: None, target: str) -> None:
    browser = Browser(app.test_client())
    browser.get("/login")
    response = browser.post("/login", {"username": "otto", "password": PASSWORD, "next": target})
    assert response.headers["Location"] == "/"


def test_wrong_password_and_rate_limit(app: Flask, users: None) -> None:
    browser = Browser(app.test_client())
    browser.get("/login")
    for _ in range(5):
        response = browser.post("/login", {"username": "otto", "password": "wrong password!"})
        assert response.status_code == 401
        assert "Wrong username or password" in response.get_data(as_text=True)
    blocked = browser.post("/login", {"username": "otto", "password": PASSWORD})
    assert blocked.status_code == 429
    assert int(blocked.headers["Retry-After"]) > 0
    assert "Too many failed attempts" in blocked.get_data(as_text=True)


def test_disabling_or_changing_the_password_ends_sessions(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    browser = browser_for(app, "otto")
    assert browser.get("/").status_code == 200
    with engine.begin() as conn:
        set_password(conn, "otto", "another long password", now=datetime.now(UTC))
    assert browser.get("/").status_code == 303
    browser = browser_for(app, "vera")
    with engine.begin() as conn:
        set_disabled(conn, "vera", True, now=datetime.now(UTC))
    assert browser.get("/").status_code == 303
    assert browser.login("vera").status_code == 401


def test_trusted_proxy_header_only_from_trusted_addresses(
    settings: Settings, engine: sa.Engine
) -> None:
    add_user(engine, "proxied", "operator")
    proxied = replace(
        settings, trusted_proxy_header="X-Forwarded-User", trusted_proxies=("10.0.0.0/8",)
    )
    app = create_app(proxied)
    try:
        client = app.test_client()
        trusted = {"REMOTE_ADDR": "10.1.2.3"}
        ok = client.get("/", headers={"X-Forwarded-User": "proxied"}, environ_base=trusted)
        assert ok.status_code == 200
        assert "proxied" in ok.get_data(as_text=True)
        spoofed = client.get(
            "/", headers={"X-Forwarded-User": "proxied"}, environ_base={"REMOTE_ADDR": "192.0.2.9"}
        )
        assert spoofed.status_code == 303
        unknown = client.get("/", headers={"X-Forwarded-User": "mallory"}, environ_base=trusted)
        assert unknown.status_code == 303
    finally:
        app.extensions["jobdesk"].dispose()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "not set"),
        ("changeme", "placeholder"),
        ("change-me-to-64-random-characters", "placeholder"),
        ("a" * 40, "placeholder"),
        ("short-but-random-Key1", "too short: 21 characters, it needs at least 32"),
        # Short and repetitive: what is wrong first is the length.
        ("abc123", "too short: 6 characters"),
        ("zzzzzzzz", "too short"),
    ],
)
def test_weak_secret_keys_are_refused(key: str, message: str) -> None:
    with pytest.raises(SecretKeyError, match=message):
        check_secret_key(key)
    with pytest.raises(SecretKeyError):
        create_app(replace(Settings(), secret_key=key, database_url="sqlite://"))
