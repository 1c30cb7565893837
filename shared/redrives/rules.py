"""A redrive's arithmetic, with no database in it: reading a rate ("60/min") and a stop
rule ("5/20"), the pace (how many requeues are due now), what a new job's first attempt
says (`verdict`), and when the stop rule holds the redrive back or stops it.

The pace is a token bucket kept as one timestamp, `next_at`: the moment the next requeue
is due. A step at `now` may requeue every one due by then — one per `60 / rate` seconds
since `next_at` — and moves `next_at` on by as many as it requeued. A step that comes
late (a slow leader, a hand-over between leaders) catches up at most `CATCH_UP_SECONDS`
worth, so in any window of W seconds a redrive requeues at most `rate * W / 60` plus that
catch-up allowance. The timestamp is the redrive's own, read and written under its row
lock, so two leaders running the same step one after the other share one allowance.

The stop rule `k/n` ("5 of the first 20"): the redrive stops as soon as k of the latest n
new jobs with an outcome failed again — at the start, k of the first n. And it gives the
first n a chance to show it: having requeued n, it requeues no more until their outcomes
settle the question (k failed: it stops; more than n - k succeeded, or all are known:
it goes on at its pace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.redrives.models import MAX_RATE_PER_MINUTE, MAX_STOP_WINDOW, Outcome

#: The default stop rule: 5 of the first 20 new jobs failing again stops the redrive.
DEFAULT_STOP_FAILURES = 5
DEFAULT_STOP_WINDOW = 20
DEFAULT_RATE_PER_MINUTE = 60
#: How much a late step may catch up, in seconds of pace (at least one job).
CATCH_UP_SECONDS = 10
#: The most requeues one step makes (one transaction; the bulk retry's cap and reason).
STEP_MAX = 1000
_MICROSECONDS_PER_MINUTE = 60_000_000

_RATE = re.compile(r"(?P<n>\d{1,9})\s*(?:(?:/|per)\s*(?P<unit>[a-z]{1,7}))?", re.IGNORECASE)
#: Jobs per minute for one job per unit (an hour is handled apart: 1/h is no whole rate).
_PER_MINUTE = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 60),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 1),
}
_HOURS = frozenset({"h", "hr", "hrs", "hour", "hours"})
#: The longest rate or stop rule read (anything longer is refused unread).
_TEXT_MAX = 40
_STOP_RULE = re.compile(r"(?P<k>\d{1,6})\s*(?:/|of|of the first)\s*(?P<n>\d{1,6})", re.IGNORECASE)


def check_rate(rate_per_minute: object) -> int:
    """A pace in jobs per minute: a whole number from 1 to `MAX_RATE_PER_MINUTE`."""
    if isinstance(rate_per_minute, bool) or not isinstance(rate_per_minute, int):
        raise ValidationError("rate", "must be a whole number of jobs per minute")
    if not 1 <= rate_per_minute <= MAX_RATE_PER_MINUTE:
        raise ValidationError(
            "rate",
            f"must be from 1 to {MAX_RATE_PER_MINUTE:,} jobs per minute, not {rate_per_minute:,}",
        )
    return rate_per_minute


def parse_rate(text: str | None) -> int:
    """Jobs per minute from "60", "60/min", "60 per minute", "2/s" or "120/h"."""
    raw = (text or "").strip()
    if not raw:
        raise ValidationError("rate", "is required, e.g. 60/min")
    found = _RATE.fullmatch(raw) if len(raw) <= _TEXT_MAX else None
    unit = (found["unit"] or "min").lower() if found else ""
    if found is None or (unit not in _PER_MINUTE and unit not in _HOURS):
        raise ValidationError("rate", f"{raw[:40]!r} is not a rate like 60/min, 2/s or 120/h")
    count = int(found["n"])
    if unit in _HOURS:
        if count % 60:
            raise ValidationError(
                "rate", f"{raw[:40]!r}: give a rate in whole jobs per minute (e.g. 1/min)"
            )
        return check_rate(count // 60)
    return check_rate(count * _PER_MINUTE[unit])


@dataclass(frozen=True, slots=True)
class StopRule:
    """Stop once `failures` of the latest `window` new jobs with an outcome failed again
    (at the start: `failures` of the first `window`)."""

    failures: int = DEFAULT_STOP_FAILURES
    window: int = DEFAULT_STOP_WINDOW

    def __post_init__(self) -> None:
        for name, value in (("failures", self.failures), ("window", self.window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError("stop_rule", f"{name} must be a whole number of at least 1")
        if self.window > MAX_STOP_WINDOW:
            raise ValidationError(
                "stop_rule",
                f"looks at {self.window:,} new jobs; at most {MAX_STOP_WINDOW:,} (e.g. 5/20)",
            )
        if self.failures > self.window:
            raise ValidationError(
                "stop_rule",
                f"{self.failures} failures of {self.window} jobs can never happen: "
                "the failures must be at most the jobs looked at (e.g. 5/20)",
            )

    def __str__(self) -> str:
        return f"{self.failures} of {self.window}"


def parse_stop_rule(text: str | None) -> StopRule:
    """A stop rule from "5/20" or "5 of 20" (blank: the default, 5 of 20)."""
    raw = (text or "").strip()
    if not raw:
        return StopRule()
    found = _STOP_RULE.fullmatch(raw) if len(raw) <= _TEXT_MAX else None
    if found is None:
        raise ValidationError(
            "stop_rule", f"{raw[:40]!r} is not a rule like 5/20 (stop after 5 of 20 fail again)"
        )
    return StopRule(int(found["k"]), int(found["n"]))


# --- the pace -------------------------------------------------------------------------------


def catch_up(rate_per_minute: int) -> int:
    """How many requeues a late step may make at once (at least one)."""
    return max(1, rate_per_minute * CATCH_UP_SECONDS // 60)


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many requeues are due, and the moment the pace counts them from."""

    due: int
    start: datetime


def allowance(next_at: datetime, now: datetime, rate_per_minute: int) -> Allowance:
    """The requeues due at `now` for a redrive whose next one was due at `next_at`."""
    burst = catch_up(rate_per_minute)
    earliest = now - timedelta(microseconds=-(-burst * _MICROSECONDS_PER_MINUTE // rate_per_minute))
    start = max(next_at, earliest)
    if now < start:
        return Allowance(0, start)
    elapsed = (now - start) // timedelta(microseconds=1)
    due = elapsed * rate_per_minute // _MICROSECONDS_PER_MINUTE + 1
    return Allowance(min(due, burst, STEP_MAX), start)


def paced(start: datetime, count: int, rate_per_minute: int) -> datetime:
    """When the requeue after `count` more from `start` is due (rounded up: never early)."""
    spent = -(-count * _MICROSECONDS_PER_MINUTE // rate_per_minute)
    return start + timedelta(microseconds=spent)


# --- outcomes and the stop rule --------------------------------------------------------------

#: Attempt outcomes that say how a job fares; `released` (handed back unrun) and
#: `cancelled` (an operator stopped it) say nothing about whether the cause is fixed.
FAILING: frozenset[str] = frozenset(
    {
        AttemptOutcome.FAILED.value,
        AttemptOutcome.TIMEOUT.value,
        AttemptOutcome.LOST.value,
        AttemptOutcome.PERMANENT.value,
    }
)
DECISIVE: frozenset[str] = FAILING | {AttemptOutcome.SUCCEEDED.value}


def verdict(first_outcome: str | None, status: str | None) -> Outcome | None:
    """What a new job says about the redrive, from its first decisive attempt's outcome
    (`DECISIVE`) and its status (None: the job is gone); None while it has not shown.

    Failing again is its FIRST decisive attempt failing — not its going dead: a retry
    policy of 1 min, 5 min, 30 min, 2 h would keep the redrive requeueing for hours
    into an outage before the first new job died. A job that went dead without an
    attempt (a payload that no longer decodes) fails too."""
    if first_outcome == AttemptOutcome.SUCCEEDED.value:
        return Outcome.SUCCEEDED
    if first_outcome in FAILING:
        return Outcome.FAILED
    if status is None:
        return Outcome.GONE
    if status == JobStatus.DEAD.value:
        return Outcome.FAILED
    if status == JobStatus.SUCCEEDED.value:
        return Outcome.SUCCEEDED
    if status == JobStatus.CANCELLED.value:
        return Outcome.CANCELLED
    return None


@dataclass(frozen=True, slots=True)
class Tally:
    """A redrive's counters: what it requeued and what became of the new jobs."""

    requeued: int
    succeeded: int
    failed: int
    undecided: int

    @property
    def awaiting(self) -> int:
        """New jobs without an outcome yet."""
        return self.requeued - self.succeeded - self.failed - self.undecided


def on_probation(rule: StopRule, tally: Tally) -> bool:
    """Having requeued the first `window` new jobs, wait for them before going on: until
    more than `window - failures` succeeded (the rule can no longer trip on them) or
    every one has its outcome. A failure count reaching the rule stops the redrive
    instead (`tripped`)."""
    return (
        tally.requeued == rule.window
        and tally.awaiting > 0
        and tally.succeeded <= rule.window - rule.failures
    )


def tripped(rule: StopRule, window_failed: int, window_size: int, decided: int) -> str | None:
    """The stop rule's verdict on the latest outcomes: `window_failed` failures among the
    latest `window_size` (at most `rule.window`) of `decided` outcomes so far. Returns
    the reason to stop, in words, or None."""
    if window_failed < rule.failures:
        return None
    which = "first" if decided <= rule.window else "last"
    return (
        f"{window_failed} of the {which} {window_size} new jobs failed again "
        f"(stop rule: {rule} new jobs failing)"
    )
