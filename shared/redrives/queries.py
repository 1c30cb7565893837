"""The read side of redrives: the list (newest first), one redrive, the new jobs that
failed again, and its progress in words — the same sentence on the dashboard and in the
terminal ("120 of 4,000 requeued, 3 failed again")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.operator.queries.jobs import ERROR_EXCERPT_CHARS
from jobdesk.shared.redrives.models import (
    ACTIVE_STATES,
    Outcome,
    RedriveState,
    redrive_items,
    redrives,
)
from jobdesk.shared.redrives.rules import StopRule, Tally, on_probation

__all__ = [
    "FailedAgain",
    "RedriveView",
    "failed_again",
    "get_redrive",
    "list_redrives",
    "redrive_progress",
]

PAGE = 50


@dataclass(frozen=True, slots=True)
class RedriveView:
    id: int
    state: str
    selection: dict[str, str]
    description: str
    reason: str
    rate_per_minute: int
    stop_failures: int
    stop_window: int
    total: int
    requeued: int
    skipped: int
    succeeded: int
    failed: int
    undecided: int
    created_by: str
    created_at: datetime
    changed_by: str | None
    changed_at: datetime | None
    change_reason: str | None
    stopped_reason: str | None
    finished_at: datetime | None

    @property
    def active(self) -> bool:
        return self.state in {state.value for state in ACTIVE_STATES}

    @property
    def left(self) -> int:
        """Dead jobs not yet requeued or skipped."""
        return self.total - self.requeued - self.skipped

    @property
    def tally(self) -> Tally:
        return Tally(self.requeued, self.succeeded, self.failed, self.undecided)

    @property
    def awaiting(self) -> int:
        """New jobs whose first outcome is not known yet."""
        return self.tally.awaiting

    @property
    def stop_rule(self) -> StopRule:
        return StopRule(self.stop_failures, self.stop_window)

    @property
    def on_probation(self) -> bool:
        """Waiting for the first new jobs' outcomes before requeueing more."""
        return self.state == RedriveState.RUNNING.value and on_probation(self.stop_rule, self.tally)


def _view(row: Any) -> RedriveView:
    return RedriveView(
        id=row.id,
        state=row.state,
        selection=dict(row.selection or {}),
        description=row.description,
        reason=row.reason,
        rate_per_minute=row.rate_per_minute,
        stop_failures=row.stop_failures,
        stop_window=row.stop_window,
        total=row.total,
        requeued=row.requeued,
        skipped=row.skipped,
        succeeded=row.succeeded,
        failed=row.failed,
        undecided=row.undecided,
        created_by=row.created_by,
        created_at=row.created_at,
        changed_by=row.changed_by,
        changed_at=row.changed_at,
        change_reason=row.change_reason,
        stopped_reason=row.stopped_reason,
        finished_at=row.finished_at,
    )


def list_redrives(
    conn: sa.Connection,
    *,
    before_id: int | None = None,
    limit: int = PAGE,
    active_only: bool = False,
) -> list[RedriveView]:
    """Redrives, newest first (`before_id`: the next page)."""
    query = sa.select(redrives).order_by(redrives.c.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(redrives.c.id < before_id)
    if active_only:
        query = query.where(redrives.c.state.in_([state.value for state in ACTIVE_STATES]))
    return [_view(row) for row in conn.execute(query)]


def get_redrive(conn: sa.Connection, redrive_id: int) -> RedriveView | None:
    row = conn.execute(sa.select(redrives).where(redrives.c.id == redrive_id)).first()
    return None if row is None else _view(row)


@dataclass(frozen=True, slots=True)
class FailedAgain:
    """A new job that failed again, beside the dead job it retried."""

    job_id: int
    new_job_id: int
    status: str | None
    error: str | None


def failed_again(conn: sa.Connection, redrive_id: int, *, limit: int = 20) -> list[FailedAgain]:
    """The latest new jobs of a redrive that failed again, with their latest error."""
    query = (
        sa.select(
            redrive_items.c.job_id,
            redrive_items.c.new_job_id,
            jobs.c.status,
            sa.func.substr(jobs.c.last_error, 1, ERROR_EXCERPT_CHARS).label("error"),
        )
        .select_from(redrive_items.outerjoin(jobs, jobs.c.id == redrive_items.c.new_job_id))
        .where(
            redrive_items.c.redrive_id == redrive_id,
            redrive_items.c.outcome == Outcome.FAILED.value,
        )
        .order_by(redrive_items.c.judged_at.desc(), redrive_items.c.job_id.desc())
        .limit(limit)
    )
    return [
        FailedAgain(row.job_id, row.new_job_id, row.status, row.error)
        for row in conn.execute(query)
    ]


def redrive_progress(redrive: RedriveView) -> str:
    """ "120 of 4,000 requeued, 3 failed again" — plus what was skipped and what the
    new jobs are still waiting for, when there is any."""
    parts = [f"{redrive.requeued:,} of {redrive.total:,} requeued"]
    if redrive.skipped:
        parts.append(f"{redrive.skipped:,} skipped")
    parts.append(f"{redrive.failed:,} failed again")
    if redrive.succeeded:
        parts.append(f"{redrive.succeeded:,} succeeded")
    if redrive.awaiting and redrive.active:
        parts.append(f"{redrive.awaiting:,} waiting for a first outcome")
    return ", ".join(parts)
