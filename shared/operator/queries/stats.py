"""Read side for "how is the queue doing": counts and ages, from the database clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import job_counts
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.operator.queries.metrics import (
    dead_since,
    open_alerts_by_rule,
    unresolved_dead_by_type,
)


@dataclass(frozen=True, slots=True)
class CountRow:
    status: str
    queue: str
    job_type: str
    count: int


def counts_by_status_queue_type(conn: sa.Connection) -> list[CountRow]:
    """Job counts grouped by status, queue and type, ordered by queue, type, status.

    PostgreSQL: summed from the counts the database keeps (`jobdesk.shared.core.job_counts`),
    a few hundred rows whatever the number of jobs. SQLite: an index-only scan.
    """
    if not job_counts.maintained(conn):
        query = (
            sa.select(jobs.c.status, jobs.c.queue, jobs.c.job_type, sa.func.count().label("n"))
            .group_by(jobs.c.status, jobs.c.queue, jobs.c.job_type)
            .order_by(jobs.c.queue, jobs.c.job_type, jobs.c.status)
        )
        return [CountRow(r.status, r.queue, r.job_type, r.n) for r in conn.execute(query)]
    totals: dict[tuple[str, str, str], int] = {}
    for group in job_counts.group_counts(conn):
        key = (group.queue, group.job_type, group.status)
        totals[key] = totals.get(key, 0) + group.count
    return [
        CountRow(status, queue, job_type, n)
        for (queue, job_type, status), n in sorted(totals.items())
        if n
    ]


# One probe of ix_jobdesk_jobs_queued_since per queue (the queues come from the counts).
_OLDEST_QUEUED = sa.text(
    """
    SELECT q.queue,
           (SELECT min(j.next_run_at) FROM jobdesk_jobs j
             WHERE j.status = 'queued' AND j.queue = q.queue AND j.next_run_at <= :now)
      FROM unnest(CAST(:queues AS varchar[])) AS q(queue)
    """
).bindparams(sa.bindparam("now", type_=UTCDateTime()))


def oldest_queued_age_by_queue(
    conn: sa.Connection, now: datetime | None = None
) -> dict[str, float]:
    """Seconds the longest-waiting due job of each queue has been waiting.

    Waiting counts from `next_run_at` (a job scheduled for later is not late yet).
    """
    now = now or db_now(conn)
    rows: Any
    if job_counts.maintained(conn):
        queues = sorted(
            {g.queue for g in job_counts.group_counts(conn) if g.status == JobStatus.QUEUED}
        )
        rows = conn.execute(_OLDEST_QUEUED, {"now": now, "queues": queues}) if queues else []
    else:
        rows = conn.execute(
            sa.select(jobs.c.queue, sa.func.min(jobs.c.next_run_at))
            .where(jobs.c.status == JobStatus.QUEUED.value, jobs.c.next_run_at <= now)
            .group_by(jobs.c.queue)
        )
    ages: dict[str, float] = {}
    for queue, oldest in rows:
        if oldest is None:
            continue
        ages[queue] = max(0.0, (now - oldest).total_seconds())
    return ages


def summarize(conn: sa.Connection, now: datetime | None = None) -> dict[str, object]:
    """Everything `jobdesk stats` prints, as plain JSON-able data."""
    now = now or db_now(conn)
    rows = counts_by_status_queue_type(conn)
    by_status: dict[str, int] = {str(s): 0 for s in JobStatus}
    by_queue: dict[str, dict[str, int]] = {}
    by_type: dict[str, dict[str, int]] = {}
    by_queue_type: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        by_queue_type.setdefault((row.queue, row.job_type), {})[row.status] = row.count
        by_status[row.status] = by_status.get(row.status, 0) + row.count
        queue_counts = by_queue.setdefault(row.queue, {})
        queue_counts[row.status] = queue_counts.get(row.status, 0) + row.count
        type_counts = by_type.setdefault(row.job_type, {})
        type_counts[row.status] = type_counts.get(row.status, 0) + row.count
    ages = oldest_queued_age_by_queue(conn, now)
    return {
        "now": now.isoformat(),
        "total": sum(by_status.values()),
        "by_status": by_status,
        "by_queue": by_queue,
        "by_type": by_type,
        "by_queue_type": [
            {"queue": queue, "job_type": job_type, "counts": counts}
            for (queue, job_type), counts in sorted(by_queue_type.items())
        ],
        "oldest_queued_age_seconds": ages,
        "oldest_queued_age_seconds_max": max(ages.values(), default=0.0),
        "dead_letters_24h": dead_since(conn, now - timedelta(hours=24)),
        "dead_letters_unresolved": sum(unresolved_dead_by_type(conn).values()),
        "open_alerts": open_alerts_by_rule(conn),
    }
