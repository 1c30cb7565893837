"""Read side: counts by status, queue and type; oldest queued age, with a fixed `now`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.operator.queries.stats import (
    counts_by_status_queue_type,
    oldest_queued_age_by_queue,
    summarize,
)
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def seed(conn: sa.Connection) -> None:
    make_job(conn, job_type="email.send", queue="email", next_run_at=NOW - timedelta(seconds=90))
    make_job(conn, job_type="email.send", queue="email", next_run_at=NOW - timedelta(seconds=10))
    make_job(conn, job_type="email.send", queue="email", next_run_at=NOW + timedelta(hours=1))
    make_job(conn, job_type="email.send", queue="email", status="dead", attempts=1)
    make_job(
        conn,
        job_type="webhook.deliver",
        queue="webhooks",
        status="failed",
        attempts=1,
        next_run_at=NOW - timedelta(hours=5),
    )
    make_job(conn, job_type="webhook.deliver", queue="webhooks", status="running", attempts=1)
    make_job(
        conn, job_type="report.generate", queue="reports", next_run_at=NOW - timedelta(seconds=30)
    )


def test_counts_by_status_queue_and_type(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        seed(conn)
    with engine.connect() as conn:
        rows = {(r.status, r.queue, r.job_type): r.count for r in counts_by_status_queue_type(conn)}
    assert rows == {
        ("queued", "email", "email.send"): 3,
        ("dead", "email", "email.send"): 1,
        ("failed", "webhooks", "webhook.deliver"): 1,
        ("running", "webhooks", "webhook.deliver"): 1,
        ("queued", "reports", "report.generate"): 1,
    }


def test_oldest_queued_age_counts_from_when_the_job_was_due(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        seed(conn)
    with engine.connect() as conn:
        ages = oldest_queued_age_by_queue(conn, now=NOW)
    # the future job is not late; the retrying webhook is not "queued"
    assert ages == {"email": 90.0, "reports": 30.0}


def test_summary_is_json_ready(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        seed(conn)
    with engine.connect() as conn:
        data = summarize(conn, now=NOW)
    assert data["total"] == 7
    assert data["by_status"] == {
        "queued": 4,
        "running": 1,
        "succeeded": 0,
        "failed": 1,
        "dead": 1,
        "cancelled": 0,
        "waiting": 0,
    }
    assert data["by_queue"]["email"] == {"queued": 3, "dead": 1}
    assert data["by_type"]["webhook.deliver"] == {"failed": 1, "running": 1}
    assert data["oldest_queued_age_seconds_max"] == 90.0
    assert data["now"] == NOW.isoformat()


def test_empty_database(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        data = summarize(conn)
    assert data["total"] == 0
    assert data["by_queue_type"] == []
    assert data["oldest_queued_age_seconds_max"] == 0.0
