"""A redrive's arithmetic without a database: rates and stop rules as people type them,
the pace, what a new job's first attempt says, and when the stop rule holds or trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.redrives.models import Outcome
from jobdesk.shared.redrives.rules import (
    StopRule,
    Tally,
    allowance,
    on_probation,
    paced,
    parse_rate,
    parse_stop_rule,
    tripped,
    verdict,
)

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "per_minute"),
    [
        ("60", 60),
        ("60/min", 60),
        ("60 / min", 60),
        ("60 per minute", 60),
        ("60 per minutes", 60),
        ("60/m", 60),
        ("2/s", 120),
        ("2 per second", 120),
        ("120/h", 2),
        ("10000/min", 10_000),
        (" 1/MIN ", 1),
    ],
)
def test_rates_read_as_people_write_them(text: str, per_minute: int) -> None:
    assert parse_rate(text) == per_minute


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is required"),
        ("0/min", "from 1 to 10,000 jobs per minute, not 0"),
        ("10001/min", "not 10,001"),
        ("200/s", "not 12,000"),
        ("30/h", "whole jobs per minute"),
        ("60/fortnight", "is not a rate like 60/min"),
        ("-5", "is not a rate"),
        ("1.5/min", "is not a rate"),
        ("60/min" + " " * 40 + "x", "is not a rate"),
    ],
)
def test_a_bad_rate_is_refused_naming_the_problem(text: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_rate(text)
    assert refused.value.field == "rate"
    assert words in refused.value.message


def test_stop_rules_read_as_people_write_them() -> None:
    assert parse_stop_rule("5/20") == StopRule(5, 20)
    assert parse_stop_rule("5 of 20") == StopRule(5, 20)
    assert parse_stop_rule("5 of the first 20") == StopRule(5, 20)
    assert parse_stop_rule("") == StopRule(5, 20)
    assert str(StopRule(3, 10)) == "3 of 10"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("20/5", "20 failures of 5 jobs can never happen"),
        ("0/20", "failures must be a whole number of at least 1"),
        ("5/1001", "at most 1,000"),
        ("five of twenty", "is not a rule like 5/20"),
    ],
)
def test_a_bad_stop_rule_is_refused_naming_the_problem(text: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_stop_rule(text)
    assert refused.value.field == "stop_rule"
    assert words in refused.value.message


def test_the_pace_is_one_job_per_interval_from_next_at() -> None:
    # 60 a minute: one due at once, one more each second after.
    assert allowance(T0, T0, 60).due == 1
    assert allowance(T0, T0 + timedelta(seconds=0.999), 60).due == 1
    assert allowance(T0, T0 + timedelta(seconds=1), 60).due == 2
    assert allowance(T0 + timedelta(seconds=1), T0, 60).due == 0
    # 7 a minute: never early, even where 60/7 seconds do not divide evenly.
    later = paced(T0, 7, 7)
    assert later == T0 + timedelta(minutes=1)
    assert paced(T0, 1, 7) == T0 + timedelta(microseconds=8_571_429)


def test_a_late_step_catches_up_ten_seconds_at_most() -> None:
    assert allowance(T0, T0 + timedelta(hours=1), 60).due == 10
    assert allowance(T0, T0 + timedelta(hours=1), 6).due == 1
    assert allowance(T0, T0 + timedelta(hours=1), 10_000).due == 1000  # one step's cap
    found = allowance(T0, T0 + timedelta(hours=1), 60)
    assert paced(found.start, found.due, 60) == T0 + timedelta(hours=1)


def test_over_any_minute_the_pace_holds_whatever_the_steps() -> None:
    """Steps at uneven moments (a slow leader, a hand-over) never requeue more than the
    rate in a minute plus the catch-up allowance."""
    rate = 60
    next_at = T0
    moments = [T0 + timedelta(seconds=s) for s in (0, 0.2, 3.7, 3.8, 25, 25.1, 59, 61, 62.5, 120)]
    done: list[tuple[datetime, int]] = []
    for now in moments:
        found = allowance(next_at, now, rate)
        if found.due:
            next_at = paced(found.start, found.due, rate)
            done.append((now, found.due))
    for start in moments:
        in_minute = sum(n for at, n in done if start <= at < start + timedelta(minutes=1))
        assert in_minute <= rate + 10


@pytest.mark.parametrize(
    ("first", "status", "expected"),
    [
        ("succeeded", "succeeded", Outcome.SUCCEEDED),
        ("succeeded", "failed", Outcome.SUCCEEDED),  # a later attempt failed: still a yes
        ("failed", "succeeded", Outcome.FAILED),  # failed first, succeeded on a retry
        ("timeout", "failed", Outcome.FAILED),
        ("lost", "queued", Outcome.FAILED),
        ("permanent", "dead", Outcome.FAILED),
        (None, "dead", Outcome.FAILED),  # dead without an attempt (undecodable payload)
        (None, "cancelled", Outcome.CANCELLED),
        (None, None, Outcome.GONE),
        (None, "queued", None),
        (None, "running", None),
        (None, "failed", None),  # only a released attempt so far: nothing shown yet
    ],
)
def test_what_a_new_job_says(
    first: str | None, status: str | None, expected: Outcome | None
) -> None:
    assert verdict(first, status) == expected


def test_probation_holds_the_first_window_until_the_rule_is_settled() -> None:
    rule = StopRule(5, 20)
    assert not on_probation(rule, Tally(requeued=19, succeeded=0, failed=0, undecided=0))
    assert on_probation(rule, Tally(requeued=20, succeeded=0, failed=0, undecided=0))
    assert on_probation(rule, Tally(requeued=20, succeeded=15, failed=4, undecided=0))
    # 16 succeeded: 5 failures among the 20 can no longer happen.
    assert not on_probation(rule, Tally(requeued=20, succeeded=16, failed=0, undecided=0))
    # Every one known (some cancelled): nothing more to wait for.
    assert not on_probation(rule, Tally(requeued=20, succeeded=10, failed=4, undecided=6))
    # Past the first window: the rule watches the latest outcomes instead.
    assert not on_probation(rule, Tally(requeued=21, succeeded=0, failed=0, undecided=0))


def test_the_rule_trips_on_k_failures_and_says_where() -> None:
    rule = StopRule(5, 20)
    assert tripped(rule, 4, 20, 40) is None
    assert tripped(rule, 5, 7, 7) == (
        "5 of the first 7 new jobs failed again (stop rule: 5 of 20 new jobs failing)"
    )
    assert tripped(rule, 6, 20, 300) == (
        "6 of the last 20 new jobs failed again (stop rule: 5 of 20 new jobs failing)"
    )
