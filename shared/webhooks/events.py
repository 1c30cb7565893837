"""How one kind of webhook is doing: its jobs by state, for one endpoint and event."""

from __future__ import annotations

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus

WEBHOOK_JOB = "webhook.deliver"


def event_counts(conn: sa.Connection, endpoint: str, event: str) -> dict[str, int]:
    """`webhook.deliver` jobs of `event` to `endpoint` by status; dead letters that support
    already requeued or ignored are not counted (they need nobody any more)."""
    settled = sa.and_(jobs.c.status == JobStatus.DEAD.value, jobs.c.resolution.is_not(None))
    query = (
        sa.select(jobs.c.status, sa.func.count())
        .where(
            jobs.c.job_type == WEBHOOK_JOB,
            jobs.c.payload["endpoint"].as_string() == endpoint,
            jobs.c.payload["event"].as_string() == event,
            sa.not_(settled),
        )
        .group_by(jobs.c.status)
    )
    return {str(status): int(count) for status, count in conn.execute(query)}
