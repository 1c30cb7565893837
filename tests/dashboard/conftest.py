"""Fixtures for dashboard tests: an app per test on the current backend, operators of
each role, logged-in Flask test clients that send the CSRF token like the browser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from jobdesk.dashboard import create_app, csrf
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.operator.commands.accounts import add_operator
from jobdesk.shared.settings import Settings
from tests.factories import make_job

SECRET = "test-secret-key-0123456789-abcdefghijklmnop"
PASSWORD = "correct horse battery"
NOW = datetime.now(UTC)
_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


@pytest.fixture
def settings(db_url: str) -> Settings:
    # Counts are cached for a few seconds in production; tests change data between requests.
    return replace(
        Settings(), database_url=db_url, secret_key=SECRET, dashboard_overview_cache_seconds=0
    )


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    application = create_app(settings)
    application.config["TESTING"] = True
    yield application
    application.extensions["jobdesk"].dispose()


def add_user(engine: sa.Engine, name: str, role: str) -> None:
    add_users(engine, [(name, role)])


def add_users(engine: sa.Engine, accounts: list[tuple[str, str]]) -> None:
    with engine.begin() as conn:
        for name, role in accounts:
            add_operator(conn, name, PASSWORD, role, now=datetime.now(UTC))


class Browser:
    """A test client that behaves like a same-origin browser form submit."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client
        self.token = ""

    def get(self, url: str, **kwargs: Any) -> Any:
        response = self.client.get(url, **kwargs)
        found = _META.search(response.get_data(as_text=True))
        if found:
            self.token = found.group(1)
        return response

    def post(self, url: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if not self.token:
            self.get("/login")
        form = {"csrf_token": self.token, **(data or {})}
        headers = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
        headers.update(kwargs.pop("headers", {}))
        return self.client.post(url, data=form, headers=headers, **kwargs)

    def login(self, name: str, password: str = PASSWORD) -> Any:
        self.get("/login")
        response = self.post("/login", {"username": name, "password": password})
        # Logging in rotates the session's token: read the new one where the next page
        # would (rendering the overview for it cost a tenth of the dashboard tests' time).
        with self.client.session_transaction() as session:
            self.token = str(session.get(csrf.SESSION_KEY, self.token))
        return response


@pytest.fixture
def users(engine: sa.Engine) -> None:
    add_users(engine, [("vera", "viewer"), ("otto", "operator"), ("ada", "admin")])


def browser_for(app: Flask, name: str | None) -> Browser:
    browser = Browser(app.test_client())
    if name:
        response = browser.login(name)
        assert response.status_code == 303, response.get_data(as_text=True)
    return browser


@pytest.fixture
def viewer(app: Flask, users: None) -> Browser:
    return browser_for(app, "vera")


@pytest.fixture
def operator(app: Flask, users: None) -> Browser:
    return browser_for(app, "otto")


@pytest.fixture
def admin(app: Flask, users: None) -> Browser:
    return browser_for(app, "ada")


def dead_job(conn: sa.Connection, **fields: Any) -> int:
    error = str(
        fields.pop("last_error", "TimeoutError: POST https://crm.example/hook timed out after 10s")
    )
    values: dict[str, Any] = {
        "job_type": "webhook.deliver",
        "queue": "webhooks",
        "status": "dead",
        "attempts": 5,
        "max_attempts": 5,
        "payload": {"endpoint": "crm", "event": "user.created", "data": {"user_id": 42}},
        "last_error": error,
        "error_fingerprint": fingerprint(error),
        "finished_at": NOW - timedelta(minutes=30),
    }
    values.update(fields)
    return make_job(conn, **values)
