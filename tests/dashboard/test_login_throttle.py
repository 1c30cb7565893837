"""The login throttle is shared through the database, atomic under concurrency, and
keyed so that changing the client address does not reset it (issue 12 #9)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import create_app
from jobdesk.shared.limits.models import rate_limits
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import PASSWORD, Browser

WRONG = "wrong password!"
#: The documented limits (failures per 15 minutes), as in `operator.login_throttle`.
MAX_FAILURES_PER_ADDRESS_AND_USER = 5
MAX_FAILURES_PER_ADDRESS = 20
MAX_FAILURES_PER_USER = 10


def test_the_documented_limits_are_the_ones_in_force() -> None:
    from jobdesk.shared.operator import login_throttle

    assert login_throttle.MAX_FAILURES_PER_ADDRESS_AND_USER == MAX_FAILURES_PER_ADDRESS_AND_USER
    assert login_throttle.MAX_FAILURES_PER_ADDRESS == MAX_FAILURES_PER_ADDRESS
    assert login_throttle.MAX_FAILURES_PER_USER == MAX_FAILURES_PER_USER
    assert login_throttle.WINDOW_SECONDS == 15 * 60


def _attempt(app: Flask, username: str, password: str = WRONG, **environ: str) -> int:
    browser = Browser(app.test_client())
    browser.get("/login", environ_base=environ)
    response = browser.post(
        "/login", {"username": username, "password": password}, environ_base=environ
    )
    return int(response.status_code)


@pytest.mark.slow
def test_concurrent_wrong_logins_from_two_processes_share_one_atomic_limit(
    settings: Settings, users: None
) -> None:
    """60 simultaneous wrong passwords against two app instances (two gunicorn
    workers): before, each process counted alone and racily — 60 x 401, 0 x 429."""
    apps = [create_app(settings), create_app(settings)]
    try:
        browsers = []
        for index in range(60):
            browser = Browser(apps[index % 2].test_client())
            browser.get("/login")
            browsers.append(browser)
        start = threading.Barrier(len(browsers))

        def wrong(browser: Browser) -> int:
            start.wait(timeout=30)
            response = browser.post("/login", {"username": "otto", "password": WRONG})
            return int(response.status_code)

        with ThreadPoolExecutor(max_workers=len(browsers)) as pool:
            statuses = Counter(pool.map(wrong, browsers))
    finally:
        for app in apps:
            app.extensions["jobdesk"].dispose()
    assert statuses == {
        401: MAX_FAILURES_PER_ADDRESS_AND_USER,
        429: 60 - MAX_FAILURES_PER_ADDRESS_AND_USER,
    }, statuses


def test_rotating_x_forwarded_for_from_loopback_does_not_escape(app: Flask, users: None) -> None:
    """A loopback client is a trusted proxy by default, so its X-Forwarded-For names the
    client address; rotating it used to give unlimited guesses."""
    statuses = Counter(
        _attempt(
            app,
            "otto",
            REMOTE_ADDR="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{index}",
        )
        for index in range(30)
    )
    assert statuses == {401: MAX_FAILURES_PER_USER, 429: 30 - MAX_FAILURES_PER_USER}, statuses
    # The account is throttled, not the clients: others still log in to theirs.
    assert _attempt(app, "vera", PASSWORD, REMOTE_ADDR="127.0.0.1") == 303


def test_one_address_spraying_usernames_is_limited(app: Flask, users: None) -> None:
    statuses = [_attempt(app, f"user{index}", REMOTE_ADDR="198.51.100.4") for index in range(25)]
    assert statuses[:MAX_FAILURES_PER_ADDRESS] == [401] * MAX_FAILURES_PER_ADDRESS
    assert set(statuses[MAX_FAILURES_PER_ADDRESS:]) == {429}
    # Another address is not affected.
    assert _attempt(app, "otto", PASSWORD, REMOTE_ADDR="198.51.100.5") == 303


def test_a_success_costs_nothing_and_clears_the_address_user_bucket(
    engine: sa.Engine, users: None
) -> None:
    from jobdesk.shared.operator.login_throttle import attempt_login

    now = datetime.now(UTC)
    with engine.begin() as conn:
        for _ in range(MAX_FAILURES_PER_ADDRESS_AND_USER - 1):
            assert attempt_login(conn, "192.0.2.1", "otto", WRONG, now=now).account is None
        ok = attempt_login(conn, "192.0.2.1", "otto", PASSWORD, now=now)
        assert ok.account is not None
        assert ok.account.username == "otto"
        # Cleared: five more wrong ones are answered (not refused) again.
        results = [attempt_login(conn, "192.0.2.1", "otto", WRONG, now=now) for _ in range(5)]
    assert [r.retry_after for r in results] == [0.0] * 5


def test_changing_the_usernames_case_does_not_escape_its_limit(
    engine: sa.Engine, users: None
) -> None:
    """Usernames are case-insensitive, so `OTTO`, `Otto`, `oTTo` … are one account: with
    case-sensitive buckets each spelling had its own allowance of guesses."""
    from jobdesk.shared.operator.login_throttle import attempt_login

    now = datetime.now(UTC)
    spellings = ["otto", "OTTO", "Otto", "oTTo", "ottO", "OtTo"]
    with engine.begin() as conn:
        results = [attempt_login(conn, "192.0.2.1", name, WRONG, now=now) for name in spellings]
    assert [r.retry_after > 0 for r in results] == [False] * 5 + [True]


def test_idle_login_buckets_are_pruned(engine: sa.Engine, users: None) -> None:
    from jobdesk.shared.operator.login_throttle import attempt_login, prune_idle_buckets

    now = datetime.now(UTC)
    with engine.begin() as conn:
        for index in range(5):
            attempt_login(conn, "192.0.2.9", f"nobody{index}", WRONG, now=now)
        conn.execute(sa.insert(rate_limits).values(key="smtp:default", tokens=1, updated_at=now))
    with engine.begin() as conn:
        assert prune_idle_buckets(conn, now=now + timedelta(minutes=14)) == 0
        assert prune_idle_buckets(conn, now=now + timedelta(minutes=16)) == 11
        left = list(conn.execute(sa.select(rate_limits.c.key)).scalars())
    assert left == ["smtp:default"]
