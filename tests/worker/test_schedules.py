"""Recurring jobs: slots from APScheduler's triggers, exactly one job per slot, the
latest missed slot only (unless catch_up), pauses kept across re-declaration."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.schedules.models import schedules
from jobdesk.shared.schedules.store import get_schedule, pause, recent_runs, resume, run_now
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance import periodic
from jobdesk.worker.maintenance.tasks import MaintenanceContext
from jobdesk.worker.registry import Registry, job, schedule
from jobdesk.worker.schedules import ScheduleSpec

TUESDAY = datetime(2026, 12, 1, 9, 0, 7, tzinfo=UTC)


def context(engine: sa.Engine, *specs: ScheduleSpec) -> MaintenanceContext:
    return MaintenanceContext(
        engine,
        Settings(),
        policy_for=Registry().policy_for,
        heartbeat_seconds=1.0,
        schedules=specs,
    )


def jobs_of(engine: sa.Engine, job_type: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(jobs.c.idempotency_key)
                .where(jobs.c.job_type == job_type)
                .order_by(jobs.c.id)
            ).scalars()
        )


# --- slots --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weekday", "expected"),
    [("0", "Sun"), ("7", "Sun"), ("1", "Mon"), ("5", "Fri"), ("sat", "Sat"), ("1-5", "Wed")],
)
def test_weekdays_count_as_in_crontab_sunday_is_zero(weekday: str, expected: str) -> None:
    spec = ScheduleSpec("s", "t.x", cron=f"0 2 * * {weekday}")
    after = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)  # a Wednesday, after 02:00
    first = (
        spec.next_after(after) if weekday != "1-5" else spec.next_after(after - timedelta(days=1))
    )
    assert first.strftime("%a") == expected


def test_cron_in_a_time_zone_and_in_words() -> None:
    spec = ScheduleSpec("report.nightly", "report.nightly", cron="0 2 * * *", tz="Europe/Berlin")
    assert spec.next_after(TUESDAY) == datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    assert spec.describe() == "every day at 02:00 (Europe/Berlin)"
    assert ScheduleSpec("w", "t.x", every=30).describe() == "every 30 seconds"
    assert ScheduleSpec("w", "t.x", cron="*/15 * * * *").describe() == "every 15 minutes (UTC)"


def test_every_counts_from_the_epoch_so_all_hosts_agree() -> None:
    spec = ScheduleSpec("warm", "cache.warm", every=30)
    assert spec.next_after(TUESDAY) == datetime(2026, 12, 1, 9, 0, 30, tzinfo=UTC)
    assert spec.next_after(datetime(2026, 12, 1, 9, 0, 30, tzinfo=UTC)) == datetime(
        2026, 12, 1, 9, 1, tzinfo=UTC
    )


def test_after_downtime_only_the_latest_slot_unless_catch_up() -> None:
    first = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    now = first + timedelta(seconds=95)
    assert ScheduleSpec("w", "t.x", every=30).slots(first, now) == [first + timedelta(seconds=90)]
    assert ScheduleSpec("w", "t.x", every=30, catch_up=True).slots(first, now) == [
        first + timedelta(seconds=s) for s in (0, 30, 60, 90)
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 2 * *"}, "needs 5 fields"),
        ({"cron": "61 2 * * *"}, "the last value \\(61\\) is higher"),
        ({"cron": "0 2 * * *", "every": 5}, "exactly one of cron= and every="),
        ({}, "exactly one of cron= and every="),
        ({"every": 0}, "every= must be"),
        ({"every": 5, "tz": "Mars/Olympus"}, "unknown time zone"),
    ],
)
def test_bad_declarations_fail_naming_the_schedule(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message) as caught:
        ScheduleSpec("nightly", "t.x", **kwargs)
    assert "nightly" in str(caught.value) or "exactly one" in message


def test_job_and_schedule_declare_into_the_registry() -> None:
    target = Registry()

    @job("report.nightly", cron="0 2 * * *", tz="Europe/Berlin", target=target)
    def nightly(payload, ctx):  # type: ignore[no-untyped-def]
        return None

    schedule("report.eu", "report.generate", {"report": "x"}, every=60, target=target)
    names = [spec.name for spec in target.schedules()]
    assert names == ["report.eu", "report.nightly"]


# --- firing -------------------------------------------------------------------------


def test_each_slot_enqueues_exactly_one_job(engine: sa.Engine) -> None:
    spec = ScheduleSpec("warm", "cache.warm", {"region": "eu"}, every=30)
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    assert periodic.run_once(ctx, TUESDAY) == 0  # the first slot is 09:00:30
    slot = datetime(2026, 12, 1, 9, 0, 30, tzinfo=UTC)
    assert periodic.run_once(ctx, slot + timedelta(seconds=1)) == 1
    assert periodic.run_once(ctx, slot + timedelta(seconds=2)) == 0
    assert jobs_of(engine, "cache.warm") == ["schedule:warm:2026-12-01T09:00:30Z"]
    with engine.connect() as conn:
        row = get_schedule(conn, "warm")
        payload = conn.execute(sa.select(jobs.c.payload)).scalar()
    assert payload == {"region": "eu"}
    assert row.next_run_at == slot + timedelta(seconds=30)
    assert row.last_slot_at == slot
    assert row.last_status == "queued"


def test_two_leaders_firing_the_same_slot_make_one_job(engine: sa.Engine) -> None:
    spec = ScheduleSpec("warm", "cache.warm", every=30)
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    later = TUESDAY + timedelta(minutes=1)
    barrier = threading.Barrier(2)
    results: list[int] = []
    errors: list[BaseException] = []

    def leader() -> None:
        try:
            barrier.wait(5)
            results.append(periodic.run_once(ctx, later))
        except BaseException as exc:
            errors.append(exc)

    pair = [threading.Thread(target=leader) for _ in range(2)]
    for thread in pair:
        thread.start()
    for thread in pair:
        thread.join(30)
    assert errors == []
    assert sorted(results) in ([0, 1], [1, 1])  # the loser's job was the same one
    assert len(jobs_of(engine, "cache.warm")) == 1


def test_catch_up_runs_every_missed_slot_once(engine: sa.Engine) -> None:
    spec = ScheduleSpec("tick", "t.tick", every=10, catch_up=True)
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    assert periodic.run_once(ctx, TUESDAY + timedelta(seconds=45)) == 5  # 09:00:52
    assert periodic.run_once(ctx, TUESDAY + timedelta(seconds=46)) == 0
    assert [key[-9:] for key in jobs_of(engine, "t.tick")] == [
        "09:00:10Z",
        "09:00:20Z",
        "09:00:30Z",
        "09:00:40Z",
        "09:00:50Z",
    ]


def test_pause_holds_the_schedule_and_survives_redeclaration(engine: sa.Engine) -> None:
    spec = ScheduleSpec("warm", "cache.warm", every=30)
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    with engine.begin() as conn:
        pause(conn, "warm", actor="ana", reason="CRM maintenance", now=TUESDAY)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    assert periodic.run_once(ctx, TUESDAY + timedelta(minutes=5)) == 0
    with engine.begin() as conn:
        row = get_schedule(conn, "warm")
        assert (row.paused, row.paused_by, row.paused_reason) == (True, "ana", "CRM maintenance")
        resume(conn, "warm", actor="ana", now=TUESDAY)
    assert periodic.run_once(ctx, TUESDAY + timedelta(minutes=5)) == 1  # the latest slot only


def test_a_changed_definition_replaces_the_stored_one(engine: sa.Engine) -> None:
    periodic.declare_schedules(engine, [ScheduleSpec("warm", "cache.warm", every=30)], TUESDAY)
    assert (
        periodic.declare_schedules(engine, [ScheduleSpec("warm", "cache.warm", every=30)], TUESDAY)
        == 0
    )
    assert (
        periodic.declare_schedules(engine, [ScheduleSpec("warm", "cache.warm", every=60)], TUESDAY)
        == 1
    )
    with engine.connect() as conn:
        row = conn.execute(sa.select(schedules)).one()
    assert (row.every_seconds, row.description) == (60.0, "every minute")


def test_run_now_adds_one_extra_run_with_its_own_key(engine: sa.Engine) -> None:
    periodic.declare_schedules(engine, [ScheduleSpec("warm", "cache.warm", every=30)], TUESDAY)
    with engine.begin() as conn:
        first = run_now(conn, "warm", actor="ana", now=TUESDAY)
        second = run_now(conn, "warm", actor="ana", now=TUESDAY + timedelta(seconds=1))
        runs = recent_runs(conn, "warm")
    assert first != second
    assert [run["id"] for run in runs] == [second, first]


def test_a_schedule_whose_last_run_died_raises_an_alert(engine: sa.Engine) -> None:
    from jobdesk.worker.maintenance import alerter

    spec = ScheduleSpec("warm", "cache.warm", every=30)
    ctx = context(engine, spec)
    periodic.declare_schedules(engine, ctx.schedules, TUESDAY)
    periodic.run_once(ctx, TUESDAY + timedelta(minutes=1))
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs).values(status="dead", attempts=1, last_error="ConnectTimeout: cache")
        )
    result = alerter.run_once(engine, TUESDAY + timedelta(minutes=2), Settings())
    assert result.opened >= 1
    with engine.connect() as conn:
        from jobdesk.shared.alerts.models import alerts

        row = conn.execute(sa.select(alerts).where(alerts.c.rule == "schedule_failed")).one()
    assert row.subject == "warm"
    assert "its last run" in row.message
    assert "ConnectTimeout: cache" in row.message
