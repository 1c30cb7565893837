"""One open alert per (rule, subject), one notification per slot — even with two leaders."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.alerts.store import notify_key
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings import alerts as rules
from jobdesk.worker.maintenance.alerter import AlertRunResult, run_once
from tests.factories import env_settings
from tests.shared.alerts.helpers import NOW, add_endpoint, ago, alert_rows, dead_jobs

CHANNELS = {"alert_email": "oncall@example.com", "alert_webhook_endpoint": "oncall"}


def notification_jobs(conn: sa.Connection) -> list[sa.Row]:  # type: ignore[type-arg]
    query = (
        sa.select(jobs.c.id, jobs.c.job_type, jobs.c.idempotency_key, jobs.c.payload)
        .where(jobs.c.job_type.in_(["email.send", "webhook.deliver"]), jobs.c.status == "queued")
        .order_by(jobs.c.id)
    )
    return list(conn.execute(query))


def seed_spike(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        dead_jobs(conn, 6, endpoint="crm", fingerprint=None)


def test_running_twice_opens_one_alert_and_notifies_once(engine: sa.Engine) -> None:
    seed_spike(engine)
    settings = env_settings(CHANNELS)
    first = run_once(engine, NOW, settings)
    second = run_once(engine, NOW + timedelta(minutes=1), settings)
    assert first.opened == 1
    assert len(first.notification_jobs) == 2
    assert second.opened == 0
    assert second.notification_jobs == []
    assert second.rules[rules.DEAD_LETTER_SPIKE].refreshed
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.DEAD_LETTER_SPIKE)
        assert alert.last_seen_at == NOW + timedelta(minutes=1)
        assert alert.notify_key == notify_key(
            rules.DEAD_LETTER_SPIKE, "webhook.deliver:crm", NOW, timedelta(minutes=30)
        )
        assert len(notification_jobs(conn)) == 2


def race(engines: list[sa.Engine], now: datetime, settings: Settings) -> list[AlertRunResult]:
    """Run the alerter on every engine at the same moment, one thread each."""
    barrier = threading.Barrier(len(engines))
    results: list[AlertRunResult] = []
    errors: list[BaseException] = []

    def leader(engine: sa.Engine) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(run_once(engine, now, settings))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=leader, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert len(results) == len(engines)
    return results


def test_two_leaders_racing_open_one_alert_and_one_notification(db_url: str) -> None:
    engines = [make_engine(db_url, settings=Settings()) for _ in range(2)]
    try:
        seed_spike(engines[0])
        settings = env_settings(CHANNELS)
        for round_ in range(3):
            results = race(engines, NOW + timedelta(seconds=round_), settings)
            assert sum(r.opened for r in results) == (1 if round_ == 0 else 0)
        with engines[0].connect() as conn:
            rows = alert_rows(conn)
            assert [(r.rule, r.subject, r.status) for r in rows] == [
                (rules.DEAD_LETTER_SPIKE, "webhook.deliver:crm", "open")
            ]
            sent = notification_jobs(conn)
        assert sorted(j.job_type for j in sent) == ["email.send", "webhook.deliver"]
    finally:
        for engine in engines:
            engine.dispose()


def test_flapping_within_cooldown_reopens_without_notifying(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "oncall")
        conn.execute(
            sa.insert(jobs).values(job_type="t", queue="slow", next_run_at=ago(minutes=11))
        )
    settings = env_settings({**CHANNELS, "alert_no_consumer_enabled": "no"})
    assert run_once(engine, NOW, settings).opened == 1
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.queue == "slow").values(status="succeeded"))
    assert run_once(engine, NOW + timedelta(minutes=1), settings).resolved == 1
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs).values(job_type="t", queue="slow", next_run_at=ago(minutes=11))
        )
    again = run_once(engine, NOW + timedelta(minutes=10), settings)
    assert again.rules[rules.QUEUE_STALLED].reopened
    assert again.notification_jobs == []
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.QUEUE_STALLED)
        assert alert.status == "open"
        assert alert.resolved_at is None
    # One notification for the opening and one for the resolution; none for the reopen.
    with engine.connect() as conn:
        keys = [j.idempotency_key for j in notification_jobs(conn)]
    assert len(keys) == 4
    assert sum(":resolved:" in k for k in keys) == 2

    # After the cooldown a new episode is a new alert row and pages again.
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.queue == "slow").values(status="succeeded"))
    run_once(engine, NOW + timedelta(minutes=11), settings)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs).values(
                job_type="t", queue="slow", next_run_at=NOW + timedelta(minutes=30)
            )
        )
    later = run_once(engine, NOW + timedelta(minutes=55), settings)
    assert later.opened == 1
    assert len(later.notification_jobs) == 2
    with engine.connect() as conn:
        assert [r.status for r in alert_rows(conn, rules.QUEUE_STALLED)] == ["resolved", "open"]


def test_notify_key_taken_in_the_same_slot_suppresses_the_notification(
    engine: sa.Engine,
) -> None:
    seed_spike(engine)
    key = notify_key(rules.DEAD_LETTER_SPIKE, "webhook.deliver:crm", NOW, timedelta(minutes=30))
    with engine.begin() as conn:
        # Another leader's (skewed) episode already notified in this slot.
        conn.execute(
            sa.insert(alerts).values(
                rule=rules.DEAD_LETTER_SPIKE,
                subject="webhook.deliver:crm",
                status="resolved",
                opened_at=ago(hours=2),
                last_seen_at=ago(hours=2),
                resolved_at=ago(hours=1),
                message="earlier",
                notify_key=key,
            )
        )
    result = run_once(engine, NOW, env_settings(CHANNELS))
    assert result.opened == 1
    assert result.rules[rules.DEAD_LETTER_SPIKE].suppressed
    assert result.notification_jobs == []


def test_long_subjects_get_a_digest_key() -> None:
    key = notify_key(rules.BREAKER_OPEN, "x" * 200, NOW, timedelta(minutes=30))
    assert len(key) <= 180
    cooldown = timedelta(minutes=30)
    same_slot = notify_key(rules.BREAKER_OPEN, "x" * 200, NOW + timedelta(minutes=29), cooldown)
    next_slot = notify_key(rules.BREAKER_OPEN, "x" * 200, NOW + timedelta(minutes=30), cooldown)
    assert key == same_slot
    assert key != next_slot
