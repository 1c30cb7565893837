"""Cron schedules across daylight-saving changes, on real `zoneinfo` rules (2026).

Fixed-time expressions (no `*` in the minute or hour field) run once per wall-clock
slot: a repeated time at its first occurrence, a skipped one at the first valid time
after the gap. Wildcard expressions run at every real moment whose wall-clock time
matches. Each expectation is also checked against a brute-force oracle that walks the
real timeline minute by minute, independent of the code under test.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.schedules.models import schedules
from jobdesk.shared.schedules.store import get_schedule, slot_key
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance import periodic
from jobdesk.worker.maintenance.tasks import MaintenanceContext
from jobdesk.worker.registry import Registry
from jobdesk.worker.schedules import ScheduleSpec

#: Zones with both changes in 2026, northern and southern, whole-hour and half-hour.
ZONES = (
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Santiago",  # changes at midnight
    "Australia/Sydney",  # southern: back in April, forward in October
    "Australia/Lord_Howe",  # a 30-minute change
)
FIXED = ("0 2 * * *", "30 2 * * *", "15 1 * * *", "45 1 * * *", "0 0 * * *", "30 23 * * *",
         "0 1,2,3 * * *", "0,30 2 * * *", "59 1 * * 0")  # fmt: skip
WILDCARD = ("0 * * * *", "*/15 * * * *", "15 * * * *", "*/20 2 * * *", "45 * * * *")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def changes_in_2026(zone: str) -> list[datetime]:
    """The instants the zone's offset changes in 2026 (whole half-hours in these zones)."""
    tz = ZoneInfo(zone)
    found, moment = [], utc(2026, 1, 1)
    offset = moment.astimezone(tz).utcoffset()
    while moment.year < 2027:
        moment += timedelta(minutes=30)
        if moment.astimezone(tz).utcoffset() != offset:
            found.append(moment)
            offset = moment.astimezone(tz).utcoffset()
    return found


def runs(spec: ScheduleSpec, start: datetime, end: datetime) -> list[datetime]:
    found, moment = [], start
    while (moment := spec.next_after(moment)) <= end:
        found.append(moment)
    return found


def local(moment: datetime, zone: str) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %z")


# --- the oracle ---------------------------------------------------------------------


def _field(text: str, value: int, low: int, high: int) -> bool:
    for item in text.split(","):
        body, _, step = item.partition("/")
        first, last = (
            (low, high) if body == "*" else (int(body.split("-")[0]), int(body.split("-")[-1]))
        )
        if first <= value <= last and (value - first) % int(step or 1) == 0:
            return True
    return False


def matches(expression: str, wall: datetime) -> bool:
    """The fields these tests use (`*`, `*/n`, lists, ranges; weekday 0 = Sunday)."""
    minute, hour, day, month, weekday = expression.split()
    return (
        _field(minute, wall.minute, 0, 59)
        and _field(hour, wall.hour, 0, 23)
        and _field(day, wall.day, 1, 31)
        and _field(month, wall.month, 1, 12)
        and _field(weekday, wall.isoweekday() % 7, 0, 6)
    )


@functools.cache
def timeline(zone: str, start: datetime, end: datetime) -> tuple[list[datetime], list[datetime]]:
    """Every real minute from six hours before `start` to six after `end`, and the wall
    time each shows."""
    tz = ZoneInfo(zone)
    minutes = int((end - start).total_seconds() // 60) + 12 * 60
    real = [start - timedelta(hours=6) + timedelta(minutes=n) for n in range(minutes)]
    return real, [moment.astimezone(tz).replace(tzinfo=None) for moment in real]


def oracle(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Walk real time minute by minute: wildcard expressions run at each real minute whose
    wall time matches; fixed-time ones once per matching wall time, at its first real
    occurrence, or (skipped by the clock) at the first real minute showing a later time."""
    real, walls = timeline(zone, start, end)
    minute, hour = expression.split()[:2]
    if minute.startswith("*") or hour.startswith("*"):
        picked = {m for m, wall in zip(real, walls, strict=True) if matches(expression, wall)}
    else:
        picked = set()
        wall = walls[0]
        while wall <= walls[-1]:
            if matches(expression, wall):
                picked.add(next(m for m, w in zip(real, walls, strict=True) if w >= wall))
            wall += timedelta(minutes=1)
    return sorted(moment for moment in picked if start < moment <= end)


@pytest.mark.slow
@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", FIXED + WILDCARD)
def test_runs_around_both_changes_match_the_oracle(zone: str, expression: str) -> None:
    spec = ScheduleSpec("s", "t.x", cron=expression, tz=zone)
    for change in changes_in_2026(zone):
        start, end = change - timedelta(hours=30), change + timedelta(hours=30)
        got = runs(spec, start, end)
        assert got == oracle(expression, zone, start, end), [local(m, zone) for m in got]


# --- what users see -----------------------------------------------------------------


def test_the_readme_nightly_job_runs_once_on_the_autumn_night() -> None:
    spec = ScheduleSpec("report.nightly", "report.nightly", cron="0 2 * * *", tz="Europe/Berlin")
    got = runs(spec, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12))
    assert [local(m, "Europe/Berlin") for m in got] == [
        "2026-10-24 02:00 +0200",
        "2026-10-25 02:00 +0200",  # the first of the two 02:00s; not again at 02:00 +0100
        "2026-10-26 02:00 +0100",
        "2026-10-27 02:00 +0100",
    ]
    half_past = ScheduleSpec("h", "t.x", cron="30 2 * * *", tz="Europe/Berlin")
    assert runs(half_past, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
        utc(2026, 10, 25, 0, 30)
    ]


@pytest.mark.parametrize(
    ("zone", "expression", "day", "expected"),
    [
        # The skipped slot runs once, at the first valid time after the gap.
        ("Europe/Berlin", "30 2 * * *", (2026, 3, 29), "2026-03-29 03:00 +0200"),
        ("Europe/London", "30 1 * * *", (2026, 3, 29), "2026-03-29 02:00 +0100"),
        ("America/New_York", "0 2 * * *", (2026, 3, 8), "2026-03-08 03:00 -0400"),
        ("America/Santiago", "0 0 * * *", (2026, 9, 6), "2026-09-06 01:00 -0300"),
        ("Australia/Sydney", "45 2 * * *", (2026, 10, 4), "2026-10-04 03:00 +1100"),
        ("Australia/Lord_Howe", "15 2 * * *", (2026, 10, 4), "2026-10-04 02:30 +1100"),
        # The repeated slot runs once, at its first occurrence.
        ("Europe/London", "30 1 * * *", (2026, 10, 25), "2026-10-25 01:30 +0100"),
        ("America/New_York", "30 1 * * *", (2026, 11, 1), "2026-11-01 01:30 -0400"),
        ("America/Santiago", "30 23 * * *", (2026, 4, 4), "2026-04-04 23:30 -0300"),
        ("Australia/Sydney", "0 2 * * *", (2026, 4, 5), "2026-04-05 02:00 +1100"),
        ("Australia/Lord_Howe", "45 1 * * *", (2026, 4, 5), "2026-04-05 01:45 +1100"),
    ],
)
def test_a_fixed_time_slot_runs_once_on_the_night_of_a_change(
    zone: str, expression: str, day: tuple[int, int, int], expected: str
) -> None:
    spec = ScheduleSpec("s", "t.x", cron=expression, tz=zone)
    midnight = datetime(*day, tzinfo=ZoneInfo(zone))
    got = runs(spec, midnight - timedelta(minutes=1), midnight + timedelta(hours=26))
    assert [local(m, zone) for m in got][:1] == [expected]
    assert len([m for m in got if m.astimezone(ZoneInfo(zone)).date() == midnight.date()]) == 1


def test_wildcard_hours_run_at_every_real_occurrence() -> None:
    hourly = ScheduleSpec("h", "t.x", cron="0 * * * *", tz="Europe/Berlin")
    autumn = runs(hourly, utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2, 30))
    assert autumn == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]
    assert [local(m, "Europe/Berlin")[11:] for m in autumn] == [
        "02:00 +0200", "02:00 +0100", "03:00 +0100"
    ]  # fmt: skip
    spring = runs(hourly, utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 2, 30))
    assert [local(m, "Europe/Berlin")[11:] for m in spring] == [
        "01:00 +0100", "03:00 +0200", "04:00 +0200"
    ]  # fmt: skip
    quarterly = ScheduleSpec("q", "t.x", cron="*/15 2 * * *", tz="Europe/Berlin")
    assert len(runs(quarterly, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))) == 8
    assert runs(quarterly, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)) == []


def test_every_is_counted_in_real_time_whatever_the_zone() -> None:
    spec = ScheduleSpec("e", "t.x", every=3600, tz="Europe/Berlin")
    assert runs(spec, utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 2, 30)) == [
        utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)
    ]  # fmt: skip


def test_slot_keys_of_ordinary_times_are_unchanged() -> None:
    spec = ScheduleSpec("nightly", "t.x", cron="0 2 * * *", tz="Europe/Berlin")
    slot = spec.next_after(utc(2026, 12, 1, 9))
    assert slot_key("nightly", slot) == "schedule:nightly:2026-12-02T01:00:00Z"
    summer = spec.next_after(utc(2026, 7, 1, 9))
    assert slot_key("nightly", summer) == "schedule:nightly:2026-07-02T00:00:00Z"


def test_catch_up_counts_each_wall_clock_slot_once() -> None:
    daily = ScheduleSpec("d", "t.x", cron="0 2 * * *", tz="Europe/Berlin", catch_up=True)
    assert daily.slots(utc(2026, 10, 24, 0), utc(2026, 10, 26, 12)) == [
        utc(2026, 10, 24, 0), utc(2026, 10, 25, 0), utc(2026, 10, 26, 1)
    ]  # fmt: skip
    latest = ScheduleSpec("d", "t.x", cron="0 2 * * *", tz="Europe/Berlin")
    assert latest.slots(utc(2026, 10, 25, 0), utc(2026, 10, 25, 1, 30)) == [utc(2026, 10, 25, 0)]


# --- firing through the database ------------------------------------------------------


def context(engine: sa.Engine, *specs: ScheduleSpec) -> MaintenanceContext:
    return MaintenanceContext(
        engine, Settings(), policy_for=Registry().policy_for, heartbeat_seconds=1.0,
        schedules=specs,
    )  # fmt: skip


def keys(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs.c.idempotency_key).order_by(jobs.c.id)).scalars())


def fire_through(engine: sa.Engine, spec: ScheduleSpec, start: datetime, end: datetime) -> None:
    """Two leaders take turns every five minutes; halfway, every worker restarts and
    declares the schedule again."""
    leaders = [context(engine, spec), context(engine, spec)]
    periodic.declare_schedules(engine, [spec], start)
    moment, turn = start, 0
    while moment <= end:
        periodic.run_once(leaders[turn % 2], moment)
        if turn == 30:
            periodic.declare_schedules(engine, [spec], moment)
        moment += timedelta(minutes=5)
        turn += 1


def test_the_autumn_night_enqueues_one_nightly_job(engine: sa.Engine) -> None:
    spec = ScheduleSpec("nightly", "report.nightly", cron="0 2 * * *", tz="Europe/Berlin")
    fire_through(engine, spec, utc(2026, 10, 24, 21, 3), utc(2026, 10, 25, 4))
    assert keys(engine) == ["schedule:nightly:2026-10-25T00:00:00Z"]
    with engine.connect() as conn:
        assert get_schedule(conn, "nightly").next_run_at == utc(2026, 10, 26, 1)


def test_the_spring_night_runs_the_skipped_slot_once_after_the_gap(engine: sa.Engine) -> None:
    spec = ScheduleSpec("nightly", "report.nightly", cron="30 2 * * *", tz="Europe/Berlin")
    fire_through(engine, spec, utc(2026, 3, 28, 21, 3), utc(2026, 3, 29, 4))
    assert keys(engine) == ["schedule:nightly:2026-03-29T01:00:00Z"]  # 03:00 CEST


def test_an_hourly_job_runs_each_real_hour_of_the_autumn_night(engine: sa.Engine) -> None:
    spec = ScheduleSpec("hourly", "t.hourly", cron="0 * * * *", tz="Europe/Berlin")
    fire_through(engine, spec, utc(2026, 10, 24, 22, 58), utc(2026, 10, 25, 3, 2))
    assert keys(engine) == [
        "schedule:hourly:2026-10-24T23:00:00Z",  # 01:00 CEST
        "schedule:hourly:2026-10-25T00:00:00Z",  # 02:00 CEST
        "schedule:hourly:2026-10-25T01:00:00Z",  # 02:00 CET
        "schedule:hourly:2026-10-25T02:00:00Z",  # 03:00 CET
    ]


def test_a_repeat_planned_by_an_earlier_version_is_not_run(engine: sa.Engine) -> None:
    """The state an upgrade can meet on the autumn night: the first 02:00 ran, and the
    stored next run is the second 02:00 (what the previous version planned)."""
    spec = ScheduleSpec("nightly", "report.nightly", cron="0 2 * * *", tz="Europe/Berlin")
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, [spec], utc(2026, 10, 24, 12))
    assert periodic.run_once(ctx, utc(2026, 10, 25, 0, 0, 1)) == 1
    with engine.begin() as conn:
        conn.execute(sa.update(schedules).values(next_run_at=utc(2026, 10, 25, 1)))
    assert periodic.run_once(ctx, utc(2026, 10, 25, 1, 0, 1)) == 0
    assert keys(engine) == ["schedule:nightly:2026-10-25T00:00:00Z"]
    with engine.connect() as conn:
        assert get_schedule(conn, "nightly").next_run_at == utc(2026, 10, 26, 1)
    assert periodic.run_once(ctx, utc(2026, 10, 26, 1, 0, 1)) == 1
    assert keys(engine)[-1] == "schedule:nightly:2026-10-26T01:00:00Z"
