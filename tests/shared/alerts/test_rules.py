"""Each alert rule fires on crafted data and resolves when the condition clears."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.limits.models import circuit_breakers
from jobdesk.shared.settings import alerts as rules
from jobdesk.shared.webhooks.models import webhook_endpoints
from jobdesk.worker.maintenance.alerter import AlertRunResult, run_once
from tests.factories import env_settings, make_job
from tests.shared.alerts.helpers import (
    NOW,
    add_breaker,
    add_endpoint,
    add_worker,
    ago,
    alert_rows,
    dead_jobs,
)


def check(engine: sa.Engine, now=NOW, **extra: str) -> AlertRunResult:  # type: ignore[no-untyped-def]
    return run_once(engine, now, env_settings(extra))


def open_subjects(engine: sa.Engine, rule: str) -> list[str]:
    with engine.connect() as conn:
        return [r.subject for r in alert_rows(conn, rule) if r.status == "open"]


def test_dead_letter_spike_fires_per_endpoint_and_holds_until_triaged(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = dead_jobs(conn, 6, endpoint="crm")
        dead_jobs(conn, 4, endpoint="billing")  # below min_count 5
        dead_jobs(conn, 6, endpoint="crm", finished=ago(hours=3))  # baseline
    result = check(engine)
    assert result.rules[rules.DEAD_LETTER_SPIKE].opened
    assert open_subjects(engine, rules.DEAD_LETTER_SPIKE) == ["webhook.deliver:crm"]
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.DEAD_LETTER_SPIKE)
    assert alert._mapping["count"] == 6
    assert alert.message.startswith("6 webhook.deliver jobs to crm died in the last 15 min: ")
    assert alert.message.endswith("ReadTimeout: timed out")
    assert alert.details["filter"] == {
        "status": "dead",
        "job_type": "webhook.deliver",
        "endpoint": "crm",
    }

    # An hour later the window has moved on, but nobody triaged: still open.
    check(engine, now=NOW + timedelta(hours=1))
    assert open_subjects(engine, rules.DEAD_LETTER_SPIKE) == ["webhook.deliver:crm"]

    # Support requeues most of them: fewer than min_count unresolved -> resolved.
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id.in_(ids[:4]))
            .values(resolution="requeued", resolved_by="ana", resolved_at=NOW)
        )
    result = check(engine, now=NOW + timedelta(hours=1, minutes=1))
    assert result.rules[rules.DEAD_LETTER_SPIKE].resolved == [alert.id]
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.DEAD_LETTER_SPIKE)
    assert alert.status == "resolved"
    assert alert.resolved_at == NOW + timedelta(hours=1, minutes=1)


def test_dead_letter_spike_needs_factor_times_baseline(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 6, job_type="report.generate", endpoint=None)
        # 96 in the previous 24 h = 1 per 15-minute window: 6 >= 3 x 1 still fires.
        dead_jobs(conn, 96, job_type="report.generate", endpoint=None, finished=ago(hours=5))
    check(engine)
    assert open_subjects(engine, rules.DEAD_LETTER_SPIKE) == ["report.generate"]

    with engine.begin() as conn:
        dead_jobs(conn, 6, job_type="email.send", endpoint=None)
        # 288 per day = 3 per window: 6 < 3 x 3 -> normal for this type.
        dead_jobs(conn, 288, job_type="email.send", endpoint=None, finished=ago(hours=2))
    check(engine)
    assert open_subjects(engine, rules.DEAD_LETTER_SPIKE) == ["report.generate"]


def test_repeated_error_from_jobs_and_attempts_then_resolves(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for _ in range(6):
            make_job(
                conn,
                job_type="crm.sync",
                status=JobStatus.FAILED.value,
                updated_at=ago(minutes=3),
                next_run_at=NOW + timedelta(minutes=5),
                last_error="ConnectError: [Errno 111] Connection refused",
                error_fingerprint="fp-refused",
                attempts=1,
            )
        # Four more jobs known only through their attempt history.
        for _ in range(4):
            job_id = make_job(conn, job_type="crm.push", status=JobStatus.QUEUED.value)
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id,
                    attempt=1,
                    outcome="failed",
                    finished_at=ago(minutes=2),
                    error="ConnectError: [Errno 111] Connection refused",
                    error_fingerprint="fp-refused",
                )
            )
        # Nine jobs of another error: below min_jobs 10.
        for _ in range(9):
            make_job(
                conn,
                status=JobStatus.DEAD.value,
                updated_at=ago(minutes=1),
                finished_at=ago(minutes=1),
                error_fingerprint="fp-other",
            )
    check(engine)
    assert open_subjects(engine, rules.REPEATED_ERROR) == ["fp-refused"]
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.REPEATED_ERROR)
    assert alert._mapping["count"] == 10
    assert alert.details["job_types"] == ["crm.push", "crm.sync"]
    assert "Connection refused" in alert.message

    result = check(engine, now=NOW + timedelta(minutes=20))
    assert result.rules[rules.REPEATED_ERROR].resolved == [alert.id]
    assert open_subjects(engine, rules.REPEATED_ERROR) == []


def test_queue_stalled_fires_over_threshold_and_resolves_when_claimed(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = make_job(conn, queue="slow", next_run_at=ago(minutes=11))
        make_job(conn, queue="slow", next_run_at=ago(minutes=1))
        make_job(conn, queue="fine", next_run_at=ago(minutes=9))
        make_job(conn, queue="later", next_run_at=NOW + timedelta(hours=1))
        make_job(conn, queue="done", next_run_at=ago(hours=1), status="succeeded")
    check(engine)
    assert open_subjects(engine, rules.QUEUE_STALLED) == ["slow"]
    with engine.connect() as conn:
        (alert,) = alert_rows(conn, rules.QUEUE_STALLED)
    assert alert._mapping["count"] == 2
    assert alert.details["oldest_age_seconds"] == 660

    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == old).values(status="succeeded"))
    check(engine)
    assert open_subjects(engine, rules.QUEUE_STALLED) == []


def test_queue_stalled_threshold_is_configurable(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, queue="q", next_run_at=ago(seconds=90))
    check(engine, alert_queue_stalled_max_age_seconds="60")
    assert open_subjects(engine, rules.QUEUE_STALLED) == ["q"]
    check(engine, alert_queue_stalled_enabled="off")
    assert open_subjects(engine, rules.QUEUE_STALLED) == []


def test_no_consumer_by_queue_and_by_job_type(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, job_type="email.send", queue="email", next_run_at=ago(minutes=5))
        make_job(conn, job_type="crm.sync", queue="default", next_run_at=ago(minutes=5))
        make_job(conn, job_type="fresh.job", queue="other", next_run_at=ago(seconds=30))
        add_worker(conn, "stale", queues=None, job_types=None, seen=ago(minutes=1))
        add_worker(conn, "leaving", queues=None, job_types=None, seen=NOW, stopping=True)
        add_worker(conn, "w1", queues=["default"], job_types=["test.noop"], seen=ago(seconds=5))
    check(engine)
    assert sorted(open_subjects(engine, rules.NO_CONSUMER)) == [
        "job_type:crm.sync",
        "queue:email",
    ]

    with engine.begin() as conn:
        add_worker(conn, "w2", queues=["email", "default"], job_types=None, seen=NOW)
    check(engine)
    assert open_subjects(engine, rules.NO_CONSUMER) == []


def test_breaker_open_longer_than_threshold(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_breaker(conn, "webhook:crm", state="open", opened=ago(minutes=11))
        add_breaker(conn, "webhook:erp", state="half_open", opened=ago(minutes=30))
        add_breaker(conn, "webhook:new", state="open", opened=ago(minutes=5))
        add_breaker(conn, "smtp:default", state="closed", opened=None)
    check(engine)
    assert open_subjects(engine, rules.BREAKER_OPEN) == ["webhook:crm", "webhook:erp"]

    with engine.begin() as conn:
        conn.execute(
            sa.update(circuit_breakers)
            .where(circuit_breakers.c.key == "webhook:crm")
            .values(state="closed", opened_at=None)
        )
    check(engine)
    assert open_subjects(engine, rules.BREAKER_OPEN) == ["webhook:erp"]


def test_endpoint_paused_longer_than_threshold(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        add_endpoint(conn, "crm", paused=True, updated=ago(hours=2))
        add_endpoint(conn, "erp", paused=True, updated=ago(minutes=10))
        add_endpoint(conn, "live", updated=ago(days=3))
    check(engine)
    assert open_subjects(engine, rules.ENDPOINT_PAUSED) == ["crm"]

    with engine.begin() as conn:
        conn.execute(
            sa.update(webhook_endpoints)
            .where(webhook_endpoints.c.name == "crm")
            .values(paused=False, updated_at=NOW)
        )
    check(engine)
    assert open_subjects(engine, rules.ENDPOINT_PAUSED) == []
