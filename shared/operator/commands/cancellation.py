"""Cancelling jobs for an operator: one job from its page or the CLI, or every job matching
a filter (capped, with a preview first), each with a required reason and audited.

A queued or retrying job is `cancelled` at once (`decisions.cancel`). A running one gets
a cancel request (`decisions.request_cancel`): its worker hears of it with its next
heartbeat, sets `ctx.cancelled`, and stops the handler hard when the grace
(`JOBDESK_CANCEL_GRACE_SECONDS`) is over; the job then ends `cancelled`. Who, when and
why are kept on the job either way, for the banner on its page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import decisions
from jobdesk.shared.core.errors import ConflictError, NotFoundError
from jobdesk.shared.core.models import cancel_requests, jobs
from jobdesk.shared.core.states import CANCEL_TARGETS, STOPPABLE, JobStatus, sql_values
from jobdesk.shared.core.validation import check_reason
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.jobs import filter_conditions
from jobdesk.shared.settings import Settings

__all__ = [
    "BULK_CAP",
    "BulkCancel",
    "CancelImpact",
    "Cancelled",
    "bulk_cancel",
    "cancel_job",
    "hard_stop_by",
    "preview_cancel",
]

#: The most jobs one bulk cancel touches (one transaction; like the other bulk actions).
BULK_CAP = 1000
#: Jobs written per statement inside a bulk cancel.
BATCH_SIZE = 200


class Cancelled(StrEnum):
    """What a cancel did to one job."""

    NOW = "cancelled"
    """It was queued or retrying: `cancelled` at once."""
    STOPPING = "stopping"
    """It is running: its worker was asked to stop it."""


#: How often one cancel tries again when the job changed state between its writes and
#: its look at the job (claimed, rescued by the reaper, retried) — each time it finds a
#: state a cancel applies to.
CANCEL_TRIES = 3
#: A state as operators read it: a `failed` job is retrying.
_STATE_WORDS = {JobStatus.FAILED.value: "retrying"}


def _state_words(status: str) -> str:
    return _STATE_WORDS.get(status, status)


def _already_asked(row: Any) -> bool:
    """A running job with a cancel request on it, or one parked beside it (its row was
    locked when the request came: `decisions.request_cancel`)."""
    requested = row.cancel_requested_at is not None or row.parked_at is not None
    return row.status == JobStatus.RUNNING.value and requested


def _describe(row: Any) -> str:
    if _already_asked(row):
        when = (row.cancel_requested_at or row.parked_at).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"job #{row.id} already has a cancel request by {row.cancelled_by or row.parked_by}"
            f" at {when}; its worker is stopping it"
        )
    return (
        f"job #{row.id} is {_state_words(row.status)}; only queued, retrying or running jobs "
        "can be cancelled"
    )


def cancel_job(
    conn: sa.Connection, job_id: int, *, actor: str, reason: str | None, now: datetime
) -> Cancelled:
    """Cancel one job (see the module). The reason is required; a job that cannot be
    cancelled (finished, dead, already being stopped) raises `ConflictError` saying why.

    Each write takes the job only in the state it expects, and the job may move in
    between (a worker claims it, the reaper hands a lost one back to retrying): when the
    job is then found in a state a cancel applies to, the cancel is tried again."""
    clean = check_reason(reason, required=True)
    assert clean is not None
    status = ""
    for _ in range(CANCEL_TRIES):
        if decisions.cancel(conn, [job_id], actor=actor, reason=clean, now=now):
            return Cancelled.NOW
        if decisions.request_cancel(conn, [job_id], actor=actor, reason=clean, now=now):
            return Cancelled.STOPPING
        row = conn.execute(
            sa.select(
                jobs.c.id,
                jobs.c.status,
                jobs.c.cancel_requested_at,
                jobs.c.cancelled_by,
                cancel_requests.c.requested_at.label("parked_at"),
                cancel_requests.c.requested_by.label("parked_by"),
            )
            .select_from(jobs.outerjoin(cancel_requests, cancel_requests.c.job_id == jobs.c.id))
            .where(jobs.c.id == job_id)
        ).one_or_none()
        if row is None:
            raise NotFoundError(f"job #{job_id} does not exist")
        if row.status not in CANCEL_TARGETS or _already_asked(row):
            raise ConflictError(_describe(row))
        status = row.status
    raise ConflictError(
        f"job #{job_id} kept changing state while it was being cancelled (it is "
        f"{_state_words(status)} now); try again"
    )


def hard_stop_by(requested_at: datetime, settings: Settings) -> datetime:
    """When a running job with a cancel request is stopped hard at the latest: its worker
    hears of the request within one heartbeat, then the grace runs."""
    lease = settings.lease_seconds
    heartbeat = min(settings.heartbeat_seconds or lease, lease / 3)
    return requested_at + timedelta(seconds=heartbeat + settings.cancel_grace_seconds)


# --- for a filter ------------------------------------------------------------------------


def _targets(conn: sa.Connection, filters: JobFilters, now: datetime) -> list[Any]:
    """The filter's conditions narrowed to jobs a cancel still changes."""
    already_asked = sa.and_(
        jobs.c.status.in_(sql_values(STOPPABLE)), jobs.c.cancel_requested_at.is_not(None)
    )
    return [
        *filter_conditions(conn, filters, now),
        jobs.c.status.in_(sql_values(CANCEL_TARGETS)),
        sa.not_(already_asked),
    ]


@dataclass(frozen=True, slots=True)
class CancelImpact:
    """What a bulk cancel would do (shown before confirming)."""

    matching: int
    selected: int
    capped: bool
    by_status: dict[str, int]
    types: dict[str, int]
    id_range: tuple[int, int] | None
    cap: int = BULK_CAP

    @property
    def running(self) -> int:
        return self.by_status.get(JobStatus.RUNNING.value, 0)


def _selected(
    conn: sa.Connection,
    filters: JobFilters,
    now: datetime,
    cap: int,
    id_range: tuple[int, int] | None = None,
) -> list[Any]:
    query = sa.select(jobs.c.id, jobs.c.status, jobs.c.job_type).where(
        *_targets(conn, filters, now)
    )
    if id_range is not None:
        query = query.where(jobs.c.id.between(*id_range))
    return list(conn.execute(query.order_by(jobs.c.id).limit(cap)))


def preview_cancel(
    conn: sa.Connection, filters: JobFilters, *, now: datetime, cap: int = BULK_CAP
) -> CancelImpact:
    """How many queued, retrying and running jobs match, which the action would take (the
    first `cap` by id), by status and type."""
    rows = _selected(conn, filters, now, cap)
    matching = int(
        conn.execute(sa.select(sa.func.count()).where(*_targets(conn, filters, now))).scalar_one()
    )
    by_status: dict[str, int] = {}
    types: dict[str, int] = {}
    for row in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
        types[row.job_type] = types.get(row.job_type, 0) + 1
    return CancelImpact(
        matching=matching,
        selected=len(rows),
        capped=matching > len(rows),
        by_status=by_status,
        types=dict(sorted(types.items(), key=lambda kv: -kv[1])),
        id_range=(rows[0].id, rows[-1].id) if rows else None,
        cap=cap,
    )


@dataclass(slots=True)
class BulkCancel:
    """What a bulk cancel did: jobs cancelled at once, running jobs asked to stop, and
    selected jobs that meanwhile finished (or were cancelled by someone else)."""

    cancelled: list[int] = field(default_factory=list)
    stopping: list[int] = field(default_factory=list)
    skipped: int = 0


def bulk_cancel(
    conn: sa.Connection,
    filters: JobFilters,
    *,
    id_range: tuple[int, int],
    actor: str,
    reason: str | None,
    now: datetime,
    cap: int = BULK_CAP,
) -> BulkCancel:
    """Cancel up to `cap` jobs matching `filters` within the previewed `id_range` (so a
    confirmation submitted twice cannot reach past what was previewed), with one required
    reason. A job claimed between the preview and now is asked to stop instead."""
    clean = check_reason(reason, required=True)
    assert clean is not None
    rows = _selected(conn, filters, now, cap, id_range)
    result = BulkCancel()
    ids = [row.id for row in rows]
    for start in range(0, len(ids), BATCH_SIZE):
        batch = ids[start : start + BATCH_SIZE]
        done = decisions.cancel(conn, batch, actor=actor, reason=clean, now=now)
        result.cancelled.extend(done)
        rest = sorted(set(batch) - set(done))
        result.stopping.extend(
            decisions.request_cancel(conn, rest, actor=actor, reason=clean, now=now)
        )
    result.skipped = len(ids) - len(result.cancelled) - len(result.stopping)
    return result
