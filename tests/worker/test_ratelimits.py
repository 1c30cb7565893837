"""Token buckets in the database (R15): taken, refilled, waits computed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.limits.rate_limits import reset_limit, try_acquire, try_acquire_many

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def take(engine: sa.Engine, now: datetime, **kw: float) -> float:
    with engine.begin() as conn:
        return try_acquire(conn, "smtp:default", now=now, **kw)  # type: ignore[arg-type]


def test_burst_then_wait_then_refill(engine: sa.Engine) -> None:
    assert [take(engine, T0, rate=3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = take(engine, T0, rate=3)
    assert wait == pytest.approx(1 / 3, rel=1e-3)
    assert take(engine, T0 + timedelta(seconds=0.34), rate=3) == 0.0
    assert take(engine, T0 + timedelta(seconds=0.34), rate=3) > 0


def test_per_minute_rate_with_burst(engine: sa.Engine) -> None:
    assert take(engine, T0, rate=60, per_seconds=60, burst=1) == 0.0
    assert take(engine, T0, rate=60, per_seconds=60, burst=1) == pytest.approx(1.0)
    assert take(engine, T0 + timedelta(seconds=1), rate=60, per_seconds=60, burst=1) == 0.0


def test_refill_is_capped_at_burst(engine: sa.Engine) -> None:
    take(engine, T0, rate=2)
    later = T0 + timedelta(hours=1)
    assert [take(engine, later, rate=2) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.5)]


def test_clock_going_backwards_does_not_mint_tokens(engine: sa.Engine) -> None:
    take(engine, T0, rate=1)
    assert take(engine, T0 - timedelta(seconds=30), rate=1) > 0


def test_reset_and_bad_input(engine: sa.Engine) -> None:
    take(engine, T0, rate=1)
    with engine.begin() as conn:
        assert reset_limit(conn, "smtp:default")
    assert take(engine, T0, rate=1) == 0.0
    with pytest.raises(ValueError, match="rate"):
        take(engine, T0, rate=0)


def take_many(engine: sa.Engine, want: int, now: datetime, **kw: float) -> tuple[int, float]:
    with engine.begin() as conn:
        return try_acquire_many(conn, "webhook:crm", want, now=now, **kw)  # type: ignore[arg-type]


def test_many_takes_what_is_there_up_to_want(engine: sa.Engine) -> None:
    assert take_many(engine, 4, T0, rate=10) == (4, 0.0)  # a new bucket starts full
    assert take_many(engine, 4, T0, rate=10) == (4, 0.0)
    assert take_many(engine, 4, T0, rate=10) == (2, 0.0)  # only two were left
    taken, wait = take_many(engine, 4, T0, rate=10)
    assert taken == 0
    assert wait == pytest.approx(0.1, rel=1e-3)
    # 0.35 s refill 3.5 tokens: three whole ones are taken, the half stays
    assert take_many(engine, 10, T0 + timedelta(seconds=0.35), rate=10) == (3, 0.0)
    assert take_many(engine, 1, T0 + timedelta(seconds=0.4), rate=10) == (1, 0.0)


def test_many_never_takes_more_than_the_burst(engine: sa.Engine) -> None:
    assert take_many(engine, 50, T0, rate=1000, burst=3) == (3, 0.0)
    assert take_many(engine, 50, T0 + timedelta(hours=1), rate=1000, burst=3) == (3, 0.0)
    with pytest.raises(ValueError, match="want"):
        take_many(engine, 0, T0, rate=1)
