"""Read side of the Queues page and `jobdesk queues list`: per queue, what is waiting,
how long the oldest has waited, what finished and failed lately, who serves it, and
whether it is paused.

Counts by state come from the kept counts (`stats.counts_by_status_queue_type`), so they
cost the same at 10M jobs as at 10. Recent outcomes are counted from the attempts
table's `finished_at` index over at most `RECENT_SCAN_CAP` attempts: past that the page
says "at least" instead of scanning an hour of a busy fleet's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.queues import QueuePause, paused_queues
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.operator.queries.metrics import LiveWorker, live_workers
from jobdesk.shared.operator.queries.stats import (
    counts_by_status_queue_type,
    oldest_queued_age_by_queue,
)

#: The windows of recent outcomes, in minutes.
WINDOWS = (5, 60)
#: Attempts looked at per window at most (newest first).
RECENT_SCAN_CAP = 100_000
#: Outcomes counted as failures (an attempt that will be retried, or the last one).
FAILURES = frozenset(
    {AttemptOutcome.FAILED, AttemptOutcome.TIMEOUT, AttemptOutcome.LOST, AttemptOutcome.PERMANENT}
)


@dataclass(frozen=True, slots=True)
class Recent:
    """Attempts finished in one window; `capped`: the scan stopped at the cap, so the
    figures are lower bounds."""

    minutes: int
    succeeded: int = 0
    failed: int = 0
    capped: bool = False


@dataclass(slots=True)
class QueueSummary:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_waiting_seconds: float | None = None
    recent: list[Recent] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    pause: QueuePause | None = None

    @property
    def waiting(self) -> int:
        return self.counts.get(JobStatus.QUEUED, 0) + self.counts.get(JobStatus.FAILED, 0)


def queue_summaries(
    conn: sa.Connection, *, now: datetime, live_since: datetime
) -> list[QueueSummary]:
    """Every queue that has jobs, is paused or is served by a live worker, by name."""
    summaries: dict[str, QueueSummary] = {}

    def get(name: str) -> QueueSummary:
        return summaries.setdefault(name, QueueSummary(name))

    for row in counts_by_status_queue_type(conn):
        counts = get(row.queue).counts
        counts[row.status] = counts.get(row.status, 0) + row.count
    for name, age in oldest_queued_age_by_queue(conn, now).items():
        get(name).oldest_waiting_seconds = age
    for name, pause in paused_queues(conn).items():
        get(name).pause = pause
    fleet = live_workers(conn, live_since)
    for worker in fleet:  # a queue a live worker serves, even with no job yet
        for name in worker.queues or ():
            get(name)
    recent = {m: _recent_outcomes(conn, now - timedelta(minutes=m)) for m in WINDOWS}
    for by_queue, _capped in recent.values():
        for name in by_queue:
            get(name)
    for summary in summaries.values():
        summary.workers = [w.id for w in fleet if _serves(w, summary.name)]
        summary.recent = [
            Recent(m, *recent[m][0].get(summary.name, (0, 0)), capped=recent[m][1]) for m in WINDOWS
        ]
    return [summaries[name] for name in sorted(summaries)]


def _serves(worker: LiveWorker, queue: str) -> bool:
    return worker.queues is None or queue in worker.queues


def _recent_outcomes(
    conn: sa.Connection, since: datetime
) -> tuple[dict[str, tuple[int, int]], bool]:
    """(succeeded, failed) attempts per queue finished since `since`, newest first up to
    the cap; and whether the cap was reached."""
    a = job_attempts.c
    newest = (
        sa.select(a.job_id, a.outcome)
        .where(a.finished_at >= since)
        .order_by(a.finished_at.desc())
        .limit(RECENT_SCAN_CAP + 1)
        .subquery()
    )
    failures = [str(o) for o in FAILURES]
    query = (
        sa.select(
            jobs.c.queue,
            sa.func.count().filter(newest.c.outcome == str(AttemptOutcome.SUCCEEDED)),
            sa.func.count().filter(newest.c.outcome.in_(failures)),
            sa.func.count(),
        )
        .select_from(newest.join(jobs, jobs.c.id == newest.c.job_id))
        .group_by(jobs.c.queue)
    )
    found: dict[str, tuple[int, int]] = {}
    seen = 0
    for queue, succeeded, failed, total in conn.execute(query):
        found[queue] = (int(succeeded), int(failed))
        seen += int(total)
    return found, seen > RECENT_SCAN_CAP
