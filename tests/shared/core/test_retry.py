"""Retry policy properties (hypothesis): bounds, caps, schedules, Retry-After, dead."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobdesk.shared.core.retry import (
    MAX_EXPONENT,
    ExponentialBackoff,
    RetryPolicy,
    Schedule,
    decide,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)

attempts = st.integers(min_value=-5, max_value=10**9)
seeds = st.integers(min_value=0, max_value=2**32)
base_seconds = st.floats(min_value=0.001, max_value=3600)


@given(
    base=base_seconds, factor=st.floats(min_value=1, max_value=10_000), attempt=attempts, seed=seeds
)
def test_backoff_delay_stays_within_base_and_cap(
    base: float, factor: float, attempt: int, seed: int
) -> None:
    backoff = ExponentialBackoff(timedelta(seconds=base), timedelta(seconds=base * factor))
    delay = backoff.delay(attempt, random.Random(seed))
    assert backoff.base <= delay <= backoff.cap + timedelta(microseconds=1)


@given(attempt=attempts, seed=seeds)
def test_backoff_ceiling_doubles_until_the_cap(attempt: int, seed: int) -> None:
    backoff = ExponentialBackoff(timedelta(seconds=1), timedelta(days=365 * 1000))
    ceiling = 2 ** min(max(attempt, 1) - 1, MAX_EXPONENT)
    assert backoff.delay(attempt, random.Random(seed)).total_seconds() <= ceiling + 1e-6


def test_backoff_has_full_jitter() -> None:
    backoff = ExponentialBackoff(timedelta(seconds=1), timedelta(seconds=1000))
    rng = random.Random(1)
    delays = {round(backoff.delay(10, rng).total_seconds()) for _ in range(200)}
    assert len(delays) > 50  # spread over [1, 512], not one value


@pytest.mark.parametrize("attempt", [60, 1000, 10**9])
def test_huge_attempt_numbers_are_capped_before_exponentiation(attempt: int) -> None:
    backoff = ExponentialBackoff(timedelta(seconds=15), timedelta(hours=6))
    assert backoff.delay(attempt, random.Random(0)) <= timedelta(hours=6)


def test_backoff_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(timedelta(0), timedelta(seconds=1))
    with pytest.raises(ValueError):
        ExponentialBackoff(timedelta(seconds=2), timedelta(seconds=1))


schedules = st.lists(st.integers(min_value=0, max_value=86_400), min_size=1, max_size=8)


@given(delays=schedules, jitter=st.floats(min_value=0, max_value=1), attempt=attempts, seed=seeds)
def test_schedule_picks_the_nth_delay_plus_bounded_jitter(
    delays: list[int], jitter: float, attempt: int, seed: int
) -> None:
    schedule = Schedule.of_seconds(delays, jitter=jitter)
    index = min(max(attempt, 1) - 1, len(delays) - 1)
    expected = timedelta(seconds=delays[index])
    delay = schedule.delay(attempt, random.Random(seed))
    assert expected <= delay <= expected * (1 + jitter) + timedelta(microseconds=1)


def test_the_documented_schedule() -> None:
    schedule = Schedule.of_seconds([60, 300, 1800, 7200], jitter=0)
    assert [schedule.delay(n).total_seconds() for n in range(1, 7)] == [
        60,
        300,
        1800,
        7200,
        7200,
        7200,
    ]


def test_schedule_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Schedule(())
    with pytest.raises(ValueError):
        Schedule.of_seconds([-1])
    with pytest.raises(ValueError):
        Schedule.of_seconds([1], jitter=2)


@given(
    attempt=st.integers(min_value=1, max_value=10**9),
    max_attempts=st.integers(min_value=1, max_value=100),
)
def test_dead_exactly_when_attempts_are_spent(attempt: int, max_attempts: int) -> None:
    decision = decide(attempt=attempt, max_attempts=max_attempts, now=NOW, rng=random.Random(0))
    assert decision.dead == (attempt >= max_attempts)
    if not decision.dead:
        assert decision.retry_at is not None
        assert decision.retry_at > NOW


@given(attempt=st.integers(min_value=1, max_value=99))
def test_permanent_errors_are_dead_at_once(attempt: int) -> None:
    decision = decide(attempt=attempt, max_attempts=100, now=NOW, permanent=True, retry_after=5)
    assert decision.dead
    assert decision.reason == "permanent error"


@given(retry_after=st.floats(allow_nan=True), cap=st.integers(min_value=1, max_value=10**6))
def test_retry_after_is_honoured_and_capped(retry_after: float, cap: int) -> None:
    policy = RetryPolicy(retry_after_cap=timedelta(seconds=cap))
    decision = decide(attempt=1, max_attempts=5, now=NOW, policy=policy, retry_after=retry_after)
    assert decision.retry_at is not None
    wait = (decision.retry_at - NOW).total_seconds()
    expected = min(retry_after, cap) if retry_after >= 0 else 0.0
    assert wait == pytest.approx(expected, abs=1e-5)
    assert decision.reason == "retry-after"


def test_retry_after_does_not_outlive_the_attempts() -> None:
    assert decide(attempt=5, max_attempts=5, now=NOW, retry_after=7).dead


def test_default_policy_backs_off_between_15_seconds_and_6_hours() -> None:
    for attempt in (1, 2, 5, 20, 60):
        decision = decide(attempt=attempt, max_attempts=100, now=NOW)
        assert decision.retry_at is not None
        assert timedelta(seconds=15) <= decision.retry_at - NOW <= timedelta(hours=6)
