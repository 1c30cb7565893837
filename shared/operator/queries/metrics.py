"""Read side for monitoring: the figures `/metrics`, the alert rules and `jobdesk stats` share.

Counts per status come from the counts PostgreSQL keeps (`jobdesk.shared.core.job_counts`);
every other query is an aggregate served by an index (`ix_jobdesk_jobs_status_queue_job_type`,
`ix_jobdesk_jobs_claimable`, `ix_jobdesk_workers_last_seen_at`, the alerts' partial index),
so a scrape stays cheap with millions of finished jobs. "Due" means claimable now: `queued` or
`failed` with `next_run_at <= now` — a job scheduled for later is not waiting yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.alerts.models import AlertStatus, alerts
from jobdesk.shared.core import job_counts
from jobdesk.shared.core.models import jobs, workers
from jobdesk.shared.core.states import CLAIMABLE, JobStatus, sql_values
from jobdesk.shared.limits.models import circuit_breakers


@dataclass(frozen=True, slots=True)
class DueBacklog:
    """Due jobs of one queue (and optionally one type) and how long the oldest has waited."""

    queue: str
    job_type: str | None
    due: int
    oldest_age_seconds: float


def due_backlog(
    conn: sa.Connection, now: datetime, *, by_type: bool = False, due_before: datetime | None = None
) -> list[DueBacklog]:
    """Due jobs per queue (or per queue and type) with the oldest one's wait in seconds.

    `due_before` narrows to jobs due at or before that time (e.g. "due for 2 minutes").
    """
    cutoff = due_before or now
    columns: list[Any] = [jobs.c.queue]
    if by_type:
        columns.append(jobs.c.job_type)
    query = (
        sa.select(*columns, sa.func.count().label("n"), sa.func.min(jobs.c.next_run_at))
        .where(jobs.c.status.in_(sql_values(CLAIMABLE)), jobs.c.next_run_at <= cutoff)
        .group_by(*columns)
        .order_by(*columns)
    )
    out: list[DueBacklog] = []
    for row in conn.execute(query):
        oldest = row[-1]
        age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        out.append(DueBacklog(row.queue, row.job_type if by_type else None, row.n, age))
    return out


def counts_by_queue_status(conn: sa.Connection) -> dict[tuple[str, str], int]:
    """Job counts keyed by (queue, status) (PostgreSQL: from the kept counts)."""
    if job_counts.maintained(conn):
        counts: dict[tuple[str, str], int] = {}
        for group in job_counts.group_counts(conn):
            key = (group.queue, group.status)
            counts[key] = counts.get(key, 0) + group.count
        return {key: n for key, n in counts.items() if n}
    query = sa.select(jobs.c.queue, jobs.c.status, sa.func.count()).group_by(
        jobs.c.queue, jobs.c.status
    )
    return {(queue, status): n for queue, status, n in conn.execute(query)}


def unresolved_dead_by_type(conn: sa.Connection) -> dict[str, int]:
    """Dead letters still waiting for a human decision, per job type."""
    if job_counts.maintained(conn):
        by_type: dict[str, int] = {}
        for group in job_counts.group_counts(conn):
            if group.status == JobStatus.DEAD.value and not group.resolved:
                by_type[group.job_type] = by_type.get(group.job_type, 0) + group.count
        return {job_type: n for job_type, n in by_type.items() if n}
    query = (
        sa.select(jobs.c.job_type, sa.func.count())
        .where(jobs.c.status == JobStatus.DEAD.value, jobs.c.resolution.is_(None))
        .group_by(jobs.c.job_type)
    )
    return {str(job_type): int(n) for job_type, n in conn.execute(query)}


def dead_since(conn: sa.Connection, since: datetime) -> int:
    """Jobs that went dead after `since` (resolved or not)."""
    query = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.status == JobStatus.DEAD.value, jobs.c.finished_at > since)
    )
    return int(conn.execute(query).scalar_one())


def open_alerts_by_rule(conn: sa.Connection) -> dict[str, int]:
    query = (
        sa.select(alerts.c.rule, sa.func.count())
        .where(alerts.c.status == AlertStatus.OPEN)
        .group_by(alerts.c.rule)
    )
    return {str(rule): int(n) for rule, n in conn.execute(query)}


def breaker_states(conn: sa.Connection) -> dict[str, str]:
    """Circuit breaker key → state (`closed`, `open`, `half_open`)."""
    query = sa.select(circuit_breakers.c.key, circuit_breakers.c.state).order_by(
        circuit_breakers.c.key
    )
    return {str(key): str(state) for key, state in conn.execute(query)}


@dataclass(frozen=True, slots=True)
class LiveWorker:
    id: str
    queues: frozenset[str] | None
    """None = every queue."""
    job_types: frozenset[str] | None
    """None = not reported; assume it can run any type."""
    concurrency: int


def live_after(now: datetime, heartbeat_seconds: float, heartbeats: float = 3.0) -> datetime:
    """Workers seen after this time count as live."""
    return now - timedelta(seconds=heartbeat_seconds * heartbeats)


def live_workers(conn: sa.Connection, since: datetime) -> list[LiveWorker]:
    """Workers whose heartbeat is newer than `since` and that are not shutting down."""
    query = (
        sa.select(workers.c.id, workers.c.queues, workers.c.job_types, workers.c.concurrency)
        .where(workers.c.last_seen_at >= since, workers.c.stopping.is_(sa.false()))
        .order_by(workers.c.id)
    )
    return [
        LiveWorker(
            row.id, _names(row.queues, empty_is_all=True), _names(row.job_types), row.concurrency
        )
        for row in conn.execute(query)
    ]


def _names(value: Any, *, empty_is_all: bool = False) -> frozenset[str] | None:
    """A worker's queue / type list as stored in JSON (a list, or an object keyed by
    name); None means "all" (`*`, or for queues an empty list)."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = list(value)
    elif isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, Iterable):
        return None
    names = frozenset(str(item) for item in value)
    if "*" in names or (empty_is_all and not names):
        return None
    return names
