"""Session lifetime as documented (12 h absolute, an idle timeout) and server-side ends:
logout, disable, enable and a password change kill every cookie of the account, copies
included (issue 12 #7)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import auth, create_app
from jobdesk.shared.operator.commands.accounts import set_disabled, set_password
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import Browser, browser_for

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

COOKIE = "jobdesk_session"


class Clock:
    """The dashboard's wall clock, moved by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = datetime.now(UTC).timestamp()
        monkeypatch.setattr(auth, "wall_clock", lambda: self.now, raising=False)

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta).total_seconds()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def _copy_cookie(source: Browser, app: Flask) -> Browser:
    """What an attacker who copied the cookie holds: a different client, same cookie."""
    cookie = source.client.get_cookie(COOKIE)
    assert cookie is not None
    thief = Browser(app.test_client())
    thief.client.set_cookie(COOKIE, cookie.value)
    return thief


def test_the_cookie_lives_12_hours_not_31_days(app: Flask, users: None) -> None:
    browser = Browser(app.test_client())
    browser.get("/login")
    response = browser.post("/login", {"username": "otto", "password": "correct horse battery"})
    assert response.status_code == 303
    cookie = response.headers["Set-Cookie"]
    expires = parsedate_to_datetime(cookie.split("Expires=")[1].split(";")[0])
    left = expires - datetime.now(UTC)
    assert timedelta(hours=11, minutes=55) < left <= timedelta(hours=12, minutes=1), cookie
    # Later requests do not slide it past the absolute end.
    browser.get("/")
    again = browser.client.get("/jobs")
    if "Set-Cookie" in again.headers:
        later = parsedate_to_datetime(
            again.headers["Set-Cookie"].split("Expires=")[1].split(";")[0]
        )
        assert later <= expires + timedelta(seconds=1)


def test_an_active_session_still_ends_after_the_absolute_lifetime(
    app: Flask, users: None, clock: Clock
) -> None:
    browser = browser_for(app, "otto")
    for _ in range(13):
        clock.advance(minutes=55)
        assert browser.get("/").status_code == 200
    clock.advance(minutes=4)  # 11 h 59 min
    assert browser.get("/").status_code == 200
    clock.advance(minutes=2)  # 12 h 1 min after the login, active all along
    assert browser.get("/").status_code == 303


def test_an_idle_session_ends(app: Flask, users: None, clock: Clock) -> None:
    browser = browser_for(app, "otto")
    clock.advance(minutes=50)
    assert browser.get("/").status_code == 200
    clock.advance(minutes=59)  # less than the idle timeout since the last request
    assert browser.get("/").status_code == 200
    clock.advance(minutes=61)
    assert browser.get("/").status_code == 303


def test_lifetime_and_idle_timeout_are_settings(
    settings: Settings, engine: sa.Engine, users: None, clock: Clock
) -> None:
    app = create_app(
        replace(settings, session_lifetime_seconds=600, session_idle_timeout_seconds=120)
    )
    try:
        browser = browser_for(app, "otto")
        clock.advance(seconds=100)
        assert browser.get("/").status_code == 200
        clock.advance(seconds=130)
        assert browser.get("/").status_code == 303
        browser = browser_for(app, "otto")
        for _ in range(6):
            clock.advance(seconds=90)
            assert browser.get("/").status_code == 200  # up to 540 s
        clock.advance(seconds=90)
        assert browser.get("/").status_code == 303  # 630 s: past the 600 s lifetime
    finally:
        app.extensions["jobdesk"].dispose()


@pytest.mark.parametrize("idle", [60, 90, 600])
def test_a_short_idle_timeout_does_not_end_an_active_session(
    settings: Settings, engine: sa.Engine, users: None, clock: Clock, idle: int
) -> None:
    """The last-seen mark was rewritten at most once a minute, so with a 60 s idle
    timeout a session clicking every 30 s ended a minute after login."""
    app = create_app(replace(settings, session_idle_timeout_seconds=idle))
    try:
        browser = browser_for(app, "otto")
        step = idle * 0.5
        for _ in range(int(600 / step)):  # ten minutes, a click every half idle timeout
            clock.advance(seconds=step)
            assert browser.get("/").status_code == 200
        # Nine tenths of the timeout after the last click it is still alive (the mark
        # lags the click by at most a tenth), and past the whole timeout it is over.
        clock.advance(seconds=idle * 0.9 - 1)
        assert browser.get("/").status_code == 200
        clock.advance(seconds=idle + 1)
        assert browser.get("/").status_code == 303
    finally:
        app.extensions["jobdesk"].dispose()


def test_a_copied_cookie_dies_at_logout(app: Flask, users: None) -> None:
    browser = browser_for(app, "otto")
    thief = _copy_cookie(browser, app)
    assert thief.get("/").status_code == 200
    assert browser.post("/logout").status_code == 303
    assert thief.get("/").status_code == 303
    assert browser.get("/").status_code == 303
    # A fresh login works again (and the old copy stays dead).
    again = browser_for(app, "otto")
    assert again.get("/").status_code == 200
    assert thief.get("/").status_code == 303


def test_re_enabling_an_account_does_not_revive_old_cookies(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    browser = browser_for(app, "vera")
    thief = _copy_cookie(browser, app)
    with engine.begin() as conn:
        set_disabled(conn, "vera", True, now=datetime.now(UTC))
    assert browser.get("/").status_code == 303
    with engine.begin() as conn:
        set_disabled(conn, "vera", False, now=datetime.now(UTC))
    assert thief.get("/").status_code == 303
    assert browser_for(app, "vera").get("/").status_code == 200


def test_a_password_change_ends_copied_cookies_too(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    browser = browser_for(app, "otto")
    thief = _copy_cookie(browser, app)
    with engine.begin() as conn:
        set_password(conn, "otto", "another long password", now=datetime.now(UTC))
    assert thief.get("/").status_code == 303
    assert browser.get("/").status_code == 303


def test_a_cookie_without_the_server_side_marks_is_refused(app: Flask, users: None) -> None:
    """A cookie signed before this change (or forged with the key but no generation)."""
    browser = browser_for(app, "otto")
    with browser.client.session_transaction() as session:
        for key in ("epoch", "iat", "seen"):
            session.pop(key, None)
    assert browser.get("/").status_code == 303
