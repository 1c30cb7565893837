"""Recurring jobs declared in code: `@job(..., cron=…|every=…)` and `jobdesk.schedule()`.

A `ScheduleSpec` says what to enqueue and when: a 5-field cron expression in a time zone
(`cron_clock.CronClock`: one run per wall-clock slot for fixed-time expressions across
daylight-saving changes, every real match for wildcard ones), or every N seconds counted
from the Unix epoch (APScheduler's `IntervalTrigger`) — so every host agrees on the slots
without talking to the others. The worker stores its specs at start
(`shared.schedules.store.sync_declared`) and the maintenance leader fires them
(`maintenance.periodic`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.interval import IntervalTrigger

from jobdesk.shared.core import validation
from jobdesk.shared.schedules.store import Declared
from jobdesk.worker.cron_clock import CronClock

__all__ = ["ScheduleSpec", "describe_cron"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Slots fired in one pass when a `catch_up` schedule comes back from a long pause.
MAX_CATCH_UP = 100
_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class ScheduleSpec:
    """One recurring job. Exactly one of `cron` and `every` is given."""

    name: str
    job_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    cron: str | None = None
    every: float | None = None
    tz: str = "UTC"
    catch_up: bool = False

    def __post_init__(self) -> None:
        validation.check_name("schedule", self.name)
        validation.check_name("job_type", self.job_type)
        validation.serialize_payload(self.payload)
        if (self.cron is None) == (self.every is None):
            raise ValueError(f"schedule {self.name!r}: give exactly one of cron= and every=")
        if self.every is not None and not 0 < self.every <= 366 * 86400:
            raise ValueError(f"schedule {self.name!r}: every= must be a number of seconds > 0")
        try:
            ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"schedule {self.name!r}: unknown time zone {self.tz!r}") from None
        _ = self.clock  # a bad cron expression fails at declaration, naming the schedule

    @cached_property
    def clock(self) -> CronClock | IntervalTrigger:
        """What computes the slots: the cron expression on its zone's wall clock, or
        the interval counted from the epoch."""
        if self.cron is not None:
            if len(self.cron.split()) != 5:
                raise ValueError(
                    f"schedule {self.name!r}: cron {self.cron!r} needs 5 fields "
                    "(minute hour day month weekday)"
                )
            minute, hour, day, month, weekday = self.cron.split()
            try:
                return CronClock(
                    minute, hour, day, month, apscheduler_weekdays(weekday), ZoneInfo(self.tz)
                )
            except ValueError as exc:
                raise ValueError(f"schedule {self.name!r}: cron {self.cron!r}: {exc}") from None
        assert self.every is not None
        return IntervalTrigger(seconds=self.every, start_date=EPOCH, timezone=UTC)

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after `moment`."""
        clock = self.clock
        if isinstance(clock, CronClock):
            return clock.next_after(moment)
        fire: datetime | None = clock.get_next_fire_time(None, moment + timedelta(microseconds=1))
        assert fire is not None, "interval triggers never run out"
        return fire.astimezone(UTC)

    def slots(self, first: datetime, now: datetime) -> list[datetime]:
        """The slots to fire now for a schedule due at `first`: every one up to `now` with
        `catch_up` (at most `MAX_CATCH_UP` per pass), otherwise only the latest. Empty
        when `first` repeats a wall-clock slot that already ran (planned by a version
        that ran both occurrences of a repeated hour) and nothing else is due yet."""
        clock = self.clock
        if isinstance(clock, CronClock) and clock.repeats_a_slot(first):
            first = self.next_after(first)
            if first > now:
                return []
        found = [first]
        while len(found) < MAX_CATCH_UP + 1:
            following = self.next_after(found[-1])
            if following > now:
                break
            found.append(following)
        if not self.catch_up:
            return found[-1:]
        return found[:MAX_CATCH_UP]

    def describe(self) -> str:
        if self.every is not None:
            return f"every {_seconds(self.every)}"
        assert self.cron is not None
        return f"{describe_cron(self.cron)} ({self.tz})"

    def declared(self, now: datetime) -> Declared:
        return Declared(
            name=self.name,
            job_type=self.job_type,
            payload=dict(self.payload),
            cron=self.cron,
            every_seconds=None if self.every is None else float(self.every),
            timezone=self.tz,
            catch_up=self.catch_up,
            description=self.describe(),
            first_run_at=self.next_after(now),
        )

    @classmethod
    def from_stored(
        cls,
        name: str,
        job_type: str,
        cron: str | None,
        every_seconds: float | None,
        timezone: str,
        catch_up: bool,
    ) -> ScheduleSpec:
        """The spec of a stored row (the leader fires what the database holds, whichever
        worker declared it)."""
        return cls(name, job_type, {}, cron, every_seconds, timezone, catch_up)


def apscheduler_weekdays(field: str) -> str:
    """The weekday field of a standard crontab (0 or 7 = Sunday, 1 = Monday …) in
    APScheduler's terms, whose numbers start at Monday = 0: numbers become day names,
    and a range through Sunday (`0-2`) is split so it does not wrap."""
    items: list[str] = []
    for item in field.lower().split(","):
        body, slash, step = item.partition("/")
        if body == "*" and not slash:
            items.append(item)
            continue
        if slash:
            # Steps count from Sunday in cron and from Monday in APScheduler: list the days.
            low, dash, high = ("0", "-", "6") if body == "*" else body.partition("-")
            first = _number(low)
            last = _number(high) if dash else 6
            items += [_WEEKDAYS[(n - 1) % 7] for n in range(first, last + 1, int(step))]
            continue
        low, dash, high = body.partition("-")
        names = [_day(low), _day(high) if dash else None]
        if dash and names[0] == "sun" and names[1] != "sun" and not slash:
            items += ["sun", f"mon-{names[1]}"]  # Sunday first: APScheduler ends weeks on it
            continue
        text = names[0] if not dash else f"{names[0]}-{names[1]}"
        items.append(f"{text}{slash}{step}")
    return ",".join(items)


def _number(token: str) -> int:
    """A weekday token as a standard cron number (Sunday = 0)."""
    day = _day(token)
    return (_WEEKDAYS.index(day) + 1) % 7


def _day(token: str) -> str:
    if token.isdigit():
        number = int(token)
        if not 0 <= number <= 7:
            raise ValueError(f"weekday {token} is not 0-7")
        return _WEEKDAYS[(number - 1) % 7]
    if token[:3] in _WEEKDAYS:
        return token[:3]
    raise ValueError(f"weekday {token!r} is not a day")


def _seconds(value: float) -> str:
    if value % 86400 == 0:
        days = int(value // 86400)
        return "day" if days == 1 else f"{days} days"
    if value % 3600 == 0:
        hours = int(value // 3600)
        return "hour" if hours == 1 else f"{hours} hours"
    if value % 60 == 0:
        minutes = int(value // 60)
        return "minute" if minutes == 1 else f"{minutes} minutes"
    return f"{value:g} seconds"


def describe_cron(expression: str) -> str:
    """A 5-field cron expression in words for the common shapes ("every day at 02:00",
    "every Monday at 09:30", "every 15 minutes"); others are shown as written."""
    minute, hour, day, month, weekday = expression.split()
    plain = minute.isdigit() and hour.isdigit()
    at = f"at {int(hour):02d}:{int(minute):02d}" if plain else ""
    if plain and day == month == "*":
        if weekday == "*":
            return f"every day {at}"
        if weekday in ("1-5", "mon-fri"):
            return f"every weekday {at}"
        names = [_weekday_name(part) for part in weekday.split(",")]
        if all(names):
            return f"every {' and '.join(n for n in names if n)} {at}"
    if plain and month == "*" and weekday == "*" and day.isdigit():
        return f"on day {int(day)} of every month {at}"
    if minute.startswith("*/") and hour == day == month == weekday == "*":
        return f"every {minute[2:]} minutes"
    if minute.isdigit() and hour == day == month == weekday == "*":
        return f"every hour at minute {int(minute)}"
    if minute == hour == day == month == weekday == "*":
        return "every minute"
    return f"cron {expression}"


def _weekday_name(part: str) -> str | None:
    names = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
    lowered = part.lower()
    if lowered.isdigit() and 0 <= int(lowered) <= 7:
        return names[int(lowered) % 7]
    if lowered in _WEEKDAYS:
        return names[(_WEEKDAYS.index(lowered) + 1) % 7]
    return None
