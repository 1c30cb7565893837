"""The demo's story in-process on both databases, with `drain()` instead of a worker:
a sign-up is one transaction; emails reach the sink once; the CRM webhook fails while
the CRM is down and is applied once when it is back; the nightly report counts the
sign-ups. Plus the demo hooks' settings and backoff override."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk.demo import hooks, story
from jobdesk.demo.sinks import Crm, DemoConsole, MailSink
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.retry import Schedule
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.reports import runs as reports
from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.shared.webhooks.endpoints import add_endpoint
from jobdesk.worker.jobs import set_data_resolver, set_recipient_resolver
from jobdesk.worker.registry import Registry, registry
from jobdesk.worker.testing import drain


class Boom(Exception):
    pass


@pytest.fixture
def demo_tables(engine: sa.Engine) -> Iterator[None]:
    story.create_tables(engine)
    yield
    story.metadata.drop_all(engine)


def _jobs(engine: sa.Engine) -> list[sa.Row[tuple[int, str, str, str | None]]]:
    with engine.connect() as conn:
        query = sa.select(jobs.c.id, jobs.c.job_type, jobs.c.status, jobs.c.idempotency_key)
        return list(conn.execute(query.order_by(jobs.c.id)))


def test_a_sign_up_is_one_transaction(engine: sa.Engine, demo_tables: None) -> None:
    def failing_sign_up() -> None:
        with engine.begin() as conn:
            story.sign_up(conn, name="Ana", email="ana@example.com", plan="free", now=db_now(conn))
            raise Boom

    with pytest.raises(Boom):
        failing_sign_up()
    with engine.connect() as conn:
        assert story.count_users(conn) == 0
    assert _jobs(engine) == []

    with engine.begin() as conn:
        now = db_now(conn)
        done = story.sign_up(conn, name="Ana", email="ana@example.com", plan="free", now=now)
    rows = {row.job_type: row for row in _jobs(engine)}
    assert rows["email.send"].id == done.email_job_id
    assert rows["email.send"].idempotency_key == f"welcome_email:user:{done.user_id}"
    assert rows["webhook.deliver"].id == done.crm_job_id
    with engine.connect() as conn:
        assert story.find_user(conn, done.user_id)["email"] == "ana@example.com"
        activity = conn.execute(sa.select(story.demo_activity)).one()
    assert (activity.user_id, activity.event, activity.plan) == (done.user_id, "signup", "free")


def test_demo_people_have_unique_addresses() -> None:
    addresses = [story.person(index)[1] for index in range(200)]
    assert len(set(addresses)) == 200


@dataclass
class World:
    engine: sa.Engine
    sink: MailSink
    console: DemoConsole
    registry: Registry
    reports_dir: Path


@pytest.fixture
def world(
    engine: sa.Engine,
    db_url: str,
    demo_tables: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[World]:
    sink = MailSink()
    sink.start()
    with engine.begin() as conn:
        now = db_now(conn)
        console = DemoConsole(Crm(hold_seconds=0.5), sink)
        secret = add_endpoint(
            conn, story.CRM_ENDPOINT, console.crm_webhook_url, allow_private=True, now=now
        )
    console.crm.secret = secret
    console.start()
    for key, value in {
        "JOBDESK_DATABASE_URL": db_url,
        "JOBDESK_SMTP_URL": sink.url,
        "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "1",
        "JOBDESK_WEBHOOK_TIMEOUT_SECONDS": "0.2",
        "JOBDESK_REPORTS_DIR": str(tmp_path / "reports"),
        "JOBDESK_REPORT_CHUNK_ROWS": "2",
    }.items():
        monkeypatch.setenv(key, value)
    # A private copy of the registry: the demo's backoff override stays in this test.
    private = Registry()
    for name in registry.names():
        found = registry.get(name)
        assert found is not None
        private.add(found)
    hooks.install(Settings.from_env(), target=private)
    try:
        yield World(engine, sink, console, private, tmp_path / "reports")
    finally:
        set_recipient_resolver(None)
        set_data_resolver(None)
        hooks.close_engines()
        console.stop()
        sink.stop()


@pytest.mark.slow
def test_the_story_in_process(world: World) -> None:
    engine = world.engine
    with engine.begin() as conn:
        for index in range(3):
            name, email, plan = story.person(index)
            story.sign_up(conn, name=name, email=email, plan=plan, now=db_now(conn))

    first = drain(engine, registry=world.registry)
    assert first.by_kind["succeeded"] == 3  # the welcome emails
    assert first.by_kind["failed"] == 3  # the CRM is down
    mails = world.sink.mails()
    assert sorted(to for mail in mails for to in mail.recipients) == [
        "ana@example.com",
        "ben@example.com",
        "chloe@example.com",
    ]
    assert "Welcome to Jobdesk Demo, Ana Lima!" in {mail.subject for mail in mails}
    assert world.console.crm.snapshot()["turned_away"] >= 1

    # The demo's schedule, not the production one: the retry is due within seconds.
    with engine.connect() as conn:
        due = conn.execute(
            sa.select(sa.func.max(jobs.c.next_run_at)).where(jobs.c.job_type == "webhook.deliver")
        ).scalar_one()
        now = db_now(conn)
    assert due - now < timedelta(seconds=5)

    world.console.set_crm(True)
    later = drain(engine, registry=world.registry, now=now + timedelta(minutes=1))
    assert later.by_kind["succeeded"] == 3
    crm = world.console.crm.snapshot()
    assert crm["applied"] == 3
    assert {d["user"] for d in crm["deliveries"]} == {
        "ana@example.com",
        "ben@example.com",
        "chloe@example.com",
    }
    assert len(world.sink.mails()) == 3  # nothing sent twice

    with engine.begin() as conn:
        today = db_now(conn).date()
        report_job = story.request_nightly_report(conn, today)
        assert story.request_nightly_report(conn, today) == report_job  # once per day
    drain(engine, registry=world.registry)
    with engine.connect() as conn:
        run = reports.find_run_for_job(conn, report_job)
    assert run is not None
    assert run["status"] == "succeeded"
    assert run["chunks_total"] == 2
    with Path(run["file_path"]).open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["day", "event", "plan", "users"]
    assert sorted(rows[1:]) == [
        [today.isoformat(), "signup", "free", "2"],
        [today.isoformat(), "signup", "team", "1"],
    ]
    statuses = {row.job_type: row.status for row in _jobs(engine)}
    assert statuses["report.generate"] == JobStatus.SUCCEEDED


def test_a_deleted_user_gets_no_email_and_no_retry(world: World) -> None:
    engine = world.engine
    with engine.begin() as conn:
        done = story.sign_up(
            conn, name="Gone", email="gone@example.com", plan="free", now=db_now(conn)
        )
        conn.execute(sa.delete(story.demo_users).where(story.demo_users.c.id == done.user_id))
    result = drain(engine, registry=world.registry, queues=["email"])
    assert result.by_status[JobStatus.DEAD] == 1
    assert world.sink.mails() == []


def test_demo_backoff_setting_is_parsed_strictly() -> None:
    assert hooks.parse_backoff("2, 4,8.5") == (2.0, 4.0, 8.5)
    with pytest.raises(SettingsError, match="JOBDESK_DEMO_WEBHOOK_BACKOFF"):
        hooks.parse_backoff(" , ")
    with pytest.raises(SettingsError, match="JOBDESK_DEMO_WEBHOOK_BACKOFF"):
        hooks.parse_backoff("2,soon")


def test_shorten_backoff_replaces_only_the_schedule() -> None:
    private = Registry()
    original = registry.get("webhook.deliver")
    assert original is not None
    private.add(original)
    hooks.shorten_backoff("webhook.deliver", [1, 2], private)
    changed = private.get("webhook.deliver")
    assert changed is not None
    assert changed.retry.backoff == Schedule.of_seconds([1, 2])
    assert changed.handler is original.handler
    assert changed.max_attempts == original.max_attempts
    assert registry.get("webhook.deliver") is original
    with pytest.raises(LookupError):
        hooks.shorten_backoff("nope.type", [1], private)


def test_the_nightly_report_is_declared_as_a_schedule_of_the_day_that_ended(
    world: World,
) -> None:
    (nightly,) = [spec for spec in world.registry.schedules() if spec.job_type == "report.generate"]
    assert (nightly.name, nightly.cron, nightly.tz) == (story.NIGHTLY_SCHEDULE, "0 2 * * *", "UTC")
    assert nightly.payload["report"] == story.REPORT_NAME
    at_two = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    parse = story.SIGNUPS_REPORT.parse_params
    assert parse(nightly.payload["params"], at_two) == {"date": "2026-12-03"}
    assert parse({}, at_two) == {"date": "2026-12-04"}
    with pytest.raises(ValidationError, match="'someday' is not a date"):
        parse({"date": "someday"}, at_two)
