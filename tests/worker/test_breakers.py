"""Circuit breakers shared through the database: open, half-open probe, close (R15)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.limits.breakers import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    allow_attempt,
    breaker_state,
    close_breaker,
    list_breakers,
    open_breaker,
    record_failure,
    record_success,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
KEY = "webhook:crm"


def fail_times(engine: sa.Engine, n: int, now: datetime, **kw: object) -> str:
    state = ""
    for _ in range(n):
        with engine.begin() as conn:
            state = record_failure(conn, KEY, now, "HTTP 503", **kw)  # type: ignore[arg-type]
    return state


def allow(engine: sa.Engine, now: datetime) -> tuple[bool, float]:
    with engine.begin() as conn:
        return allow_attempt(conn, KEY, now)


def test_unknown_key_is_closed_and_allowed(engine: sa.Engine) -> None:
    assert allow(engine, T0) == (True, 0.0)
    with engine.connect() as conn:
        assert breaker_state(conn, KEY, T0).state == CLOSED
        assert list_breakers(conn) == []


def test_opens_after_threshold_consecutive_failures(engine: sa.Engine) -> None:
    assert fail_times(engine, 2, T0, threshold=3) == CLOSED
    assert allow(engine, T0)[0]
    assert fail_times(engine, 1, T0, threshold=3) == OPEN
    allowed, wait = allow(engine, T0 + timedelta(seconds=10))
    assert not allowed
    assert wait == pytest.approx(20.0)
    with engine.connect() as conn:
        view = breaker_state(conn, KEY, T0)
    assert (view.state, view.consecutive_failures, view.last_error) == (OPEN, 3, "HTTP 503")


def test_success_resets_the_count(engine: sa.Engine) -> None:
    fail_times(engine, 2, T0, threshold=3)
    with engine.begin() as conn:
        record_success(conn, KEY, T0)
    assert fail_times(engine, 2, T0, threshold=3) == CLOSED


def test_half_open_allows_exactly_one_probe_then_success_closes(engine: sa.Engine) -> None:
    fail_times(engine, 1, T0, threshold=1)
    later = T0 + timedelta(seconds=31)
    assert allow(engine, later) == (True, 0.0)
    with engine.connect() as conn:
        assert breaker_state(conn, KEY, later).state == HALF_OPEN
    assert allow(engine, later)[0] is False
    with engine.begin() as conn:
        record_success(conn, KEY, later)
        assert breaker_state(conn, KEY, later).state == CLOSED
    assert allow(engine, later) == (True, 0.0)


def test_failed_probe_reopens_with_a_longer_cooldown(engine: sa.Engine) -> None:
    fail_times(engine, 1, T0, threshold=1, cooldown=timedelta(seconds=30))
    probe_at = T0 + timedelta(seconds=31)
    assert allow(engine, probe_at)[0]
    assert fail_times(engine, 1, probe_at, threshold=1) == OPEN
    with engine.connect() as conn:
        view = breaker_state(conn, KEY, probe_at)
    assert view.retry_at == probe_at + timedelta(seconds=60)
    # capped by max_cooldown
    second = probe_at + timedelta(seconds=61)
    assert allow(engine, second)[0]
    fail_times(engine, 1, second, threshold=1, max_cooldown=timedelta(seconds=90))
    with engine.connect() as conn:
        assert breaker_state(conn, KEY, second).retry_at == second + timedelta(seconds=90)


def test_stale_probe_is_given_up(engine: sa.Engine) -> None:
    fail_times(engine, 1, T0, threshold=1)
    probe_at = T0 + timedelta(seconds=31)
    assert allow(engine, probe_at)[0]
    assert not allow(engine, probe_at + timedelta(seconds=5))[0]
    assert allow(engine, probe_at + timedelta(seconds=61))[0]


def test_operator_pause_holds_until_closed(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        view = open_breaker(conn, KEY, T0, "provider maintenance")
    assert view.manual
    assert not allow(engine, T0 + timedelta(days=1))[0]
    with engine.begin() as conn:
        record_success(conn, KEY, T0)  # a late success must not undo the pause
        assert breaker_state(conn, KEY, T0).state == OPEN
        assert close_breaker(conn, KEY, T0).state == CLOSED
    assert allow(engine, T0)[0]


def test_operator_pause_with_end_time(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        open_breaker(conn, KEY, T0, "deploy", until=T0 + timedelta(minutes=5))
    assert not allow(engine, T0 + timedelta(minutes=4))[0]
    assert allow(engine, T0 + timedelta(minutes=5))[0]


def test_bad_input_is_refused(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        with pytest.raises(ValueError, match="reason"):
            open_breaker(conn, KEY, T0, "  ")
        with pytest.raises(ValueError, match="key"):
            record_failure(conn, "", T0, "x")
        with pytest.raises(ValueError, match="threshold"):
            record_failure(conn, KEY, T0, "x", threshold=0)
