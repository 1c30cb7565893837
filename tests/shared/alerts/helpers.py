"""Crafting rows for the alert, retention and metrics tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.models import workers
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.limits.models import circuit_breakers
from jobdesk.shared.settings.alerts import AlertConfig
from jobdesk.shared.webhooks.models import webhook_endpoints
from tests.factories import env_settings, make_job

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


def config(**extra: str) -> AlertConfig:
    return AlertConfig.from_settings(env_settings(extra))


def dead_jobs(
    conn: sa.Connection,
    n: int,
    *,
    job_type: str = "webhook.deliver",
    endpoint: str | None = "crm",
    finished: datetime | None = None,
    error: str = "ReadTimeout: timed out",
    fingerprint: str | None = "fp-timeout",
    **fields: Any,
) -> list[int]:
    payload: dict[str, Any] = {"endpoint": endpoint, "event": "user.created"} if endpoint else {}
    finished = finished or ago(minutes=5)
    return [
        make_job(
            conn,
            job_type=job_type,
            payload=payload,
            status=JobStatus.DEAD.value,
            finished_at=finished,
            updated_at=finished,
            last_error=error,
            error_fingerprint=fingerprint,
            **fields,
        )
        for _ in range(n)
    ]


def add_worker(
    conn: sa.Connection,
    worker_id: str,
    *,
    queues: list[str] | None,
    job_types: list[str] | None,
    seen: datetime,
    stopping: bool = False,
) -> None:
    conn.execute(
        sa.insert(workers).values(
            id=worker_id,
            host="h",
            pid=1,
            queues=queues,
            job_types=job_types,
            concurrency=4,
            version="test",
            started_at=seen,
            last_seen_at=seen,
            stopping=stopping,
        )
    )


def add_breaker(conn: sa.Connection, key: str, *, state: str, opened: datetime | None) -> None:
    conn.execute(
        sa.insert(circuit_breakers).values(
            key=key,
            state=state,
            consecutive_failures=7,
            opened_at=opened,
            retry_at=None,
            last_error="ConnectError: connection refused",
            updated_at=opened or NOW,
        )
    )


def add_endpoint(
    conn: sa.Connection, name: str, *, paused: bool = False, updated: datetime = NOW
) -> None:
    conn.execute(
        sa.insert(webhook_endpoints).values(
            name=name,
            url=f"http://127.0.0.1:9/{name}",
            secret="whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=",
            paused=paused,
            updated_at=updated,
            created_at=updated,
        )
    )


def alert_rows(conn: sa.Connection, rule: str | None = None) -> list[sa.Row[Any]]:
    query = sa.select(alerts).order_by(alerts.c.id)
    if rule:
        query = query.where(alerts.c.rule == rule)
    return list(conn.execute(query))
