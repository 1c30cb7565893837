"""Cron expressions on a local wall clock: which real instants their slots run at.

A cron expression names wall-clock times in its time zone. Twice a year a zone with
daylight saving time repeats a stretch of its clock (autumn) or skips one (spring).
Jobdesk follows Vixie cron's rule:

- a **fixed-time** expression (no `*` at the start of the minute or hour field:
  `0 2 * * *`, `30 1-3 * * 1-5`) runs once per wall-clock slot: a repeated time at its
  first occurrence, a skipped time at the first valid time after the gap (02:30 on the
  spring-forward night in Berlin runs at 03:00; slots that meet there run once);
- a **wildcard** expression (`*` in the minute or hour field: `0 * * * *`,
  `*/15 * * * *`) runs at every real moment whose wall-clock time matches: twice in a
  repeated hour, and not at times the clock skips.

Slots are enumerated on the naive wall-clock calendar (APScheduler's `CronTrigger` in
UTC, where no time repeats or is missing) and then placed on the zone's real timeline
with `zoneinfo`. Each run is one UTC instant computed from the expression and the
zone's rules alone, so every host and every leader derives the same instants — and so
the same idempotency keys — without talking to the others.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

__all__ = ["CronClock", "is_fixed_time"]

_TICK = timedelta(microseconds=1)
#: Slots looked at for one answer before giving up (a repeated stretch of a clock holds
#: at most a day of minutes; nothing real comes near this).
_MAX_SLOTS = 10_000


def is_fixed_time(minute: str, hour: str) -> bool:
    """Vixie cron's test: a `*` opening the minute or hour field makes a wildcard job."""
    return not (minute.startswith("*") or hour.startswith("*"))


class CronClock:
    """The runs of one cron expression in one time zone (see the module for the rule)."""

    def __init__(
        self, minute: str, hour: str, day: str, month: str, day_of_week: str, zone: ZoneInfo
    ) -> None:
        # Raises ValueError for a bad field; the caller names the schedule.
        self._wall = CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=UTC
        )
        self.zone = zone
        self.fixed_time = is_fixed_time(minute, hour)

    def next_after(self, moment: datetime) -> datetime:
        """The first run strictly after `moment` (aware), as a UTC datetime."""
        moment = moment.astimezone(UTC)
        local = moment.astimezone(self.zone)
        start = local.replace(tzinfo=None)
        if not self.fixed_time:
            # Inside the first pass of a repeated stretch, the times already passed come
            # round again: look from as far back as the clock will be set.
            start -= _repeat_length(local)
        best: datetime | None = None
        slot = self._slot_from(start, inclusive=True)
        for _ in range(_MAX_SLOTS):
            earliest, runs = self._runs_of(slot)
            for run in runs:
                if run > moment and (best is None or run < best):
                    best = run
            # Fixed-time runs never go backwards; wildcard runs of later slots are never
            # earlier than `earliest` of this one (see `_runs_of`).
            if best is not None and (self.fixed_time or earliest >= best):
                return best
            slot = self._slot_from(slot, inclusive=False)
        raise RuntimeError(f"no cron run found within {_MAX_SLOTS} slots after {moment}")

    def repeats_a_slot(self, moment: datetime) -> bool:
        """Whether `moment` is the second occurrence of a repeated wall-clock time that a
        fixed-time expression has already run at (a run planned by a version that ran
        both occurrences)."""
        if not self.fixed_time:
            return False
        local = moment.astimezone(self.zone)
        return bool(local.fold) and _repeat_length(local.replace(fold=0)) > timedelta(0)

    def _slot_from(self, wall: datetime, *, inclusive: bool) -> datetime:
        """The first wall-clock slot at (or strictly after) the naive time `wall`."""
        start = wall.replace(tzinfo=UTC)
        if not inclusive:
            start += _TICK
        found: datetime | None = self._wall.get_next_fire_time(None, start)
        if found is None:
            raise ValueError("the cron expression has no further run")
        return found.replace(tzinfo=None)

    def _runs_of(self, slot: datetime) -> tuple[datetime, tuple[datetime, ...]]:
        """The real instants of one wall-clock slot under this expression's rule, after a
        lower bound: the instant the slot would have on the clock before any change
        there, which never decreases from one slot with runs to the next."""
        first = slot.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        second = slot.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        if first == second:  # an ordinary time
            return first, (first,)
        if first.astimezone(self.zone).replace(tzinfo=None) == slot:
            # The clock shows this time twice (set back): `first` is the earlier.
            return first, (first,) if self.fixed_time else (first, second)
        # The clock skips this time (set forward): `second` lies before the change,
        # `first` after it.
        if not self.fixed_time:
            return first, ()
        return first, (self._gap_end(second, first),)

    def _gap_end(self, before: datetime, after: datetime) -> datetime:
        """The instant the clock was set forward, between `before` and `after`: the first
        valid time after the gap. Zone changes fall on whole seconds."""
        offset_after = after.astimezone(self.zone).utcoffset()
        low, high = int(before.timestamp()), int(after.timestamp())
        while high - low > 1:
            middle = (low + high) // 2
            probe = datetime.fromtimestamp(middle, UTC).astimezone(self.zone)
            if probe.utcoffset() == offset_after:
                high = middle
            else:
                low = middle
        return datetime.fromtimestamp(high, UTC)


def _repeat_length(local: datetime) -> timedelta:
    """How far the clock will be set back over the local time `local` (zero unless it
    is the first occurrence of a time the clock shows twice)."""
    if local.fold:
        return timedelta(0)
    earlier = local.utcoffset()
    later = local.replace(fold=1).utcoffset()
    if earlier is None or later is None or later >= earlier:
        return timedelta(0)
    return earlier - later
