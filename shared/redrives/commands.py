"""Starting, pausing, resuming and cancelling a redrive: each validates, changes the
redrive's row and writes its audit row (`redrive.start`, `.pause`, `.resume`, `.cancel`)
in the caller's transaction. The dashboard's forms and the CLI call these.

Changes of state are compare-and-set on the redrive's state, so of two operators
pausing one redrive the second is told it is already paused, and an operator's pause
never undoes the stop rule's stop a moment earlier.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.validation import check_reason
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.redrives.models import (
    ACTIVE_STATES,
    RedriveState,
    redrive_items,
    redrives,
)
from jobdesk.shared.redrives.rules import StopRule, check_rate
from jobdesk.shared.redrives.selection import (
    REDRIVE_CAP,
    candidates,
    check_selection,
    describe_selection,
)

__all__ = [
    "cancel_redrive",
    "pause_redrive",
    "resume_redrive",
    "start_redrive",
    "subject_of",
]


def subject_of(redrive_id: int) -> str:
    """The audit rows' subject for a redrive (its state changes and its retries)."""
    return f"redrive:{redrive_id}"


def start_redrive(
    conn: sa.Connection,
    filters: JobFilters,
    *,
    rate_per_minute: int,
    stop_rule: StopRule,
    actor: str,
    reason: str | None,
    now: datetime,
) -> int:
    """Start a redrive of the unresolved dead jobs matching `filters` (an error group, a
    dead-letter filter); returns its id. Its set is frozen now: the first `REDRIVE_CAP`
    matching jobs by id, less those another running or paused redrive still holds.

    Refused (`ValidationError`, nothing written): no filter at all (dead jobs are
    redriven by choosing them, never all by default), no matching job, a rate or a
    reason out of bounds."""
    rate = check_rate(rate_per_minute)
    clean = check_reason(reason, required=True)
    assert clean is not None  # required: a blank one raised
    check_selection(filters)
    description = describe_selection(conn, filters)
    # A savepoint: a refusal below leaves the caller's transaction as it was.
    with conn.begin_nested():
        redrive_id = conn.execute(
            sa.insert(redrives)
            .values(
                state=RedriveState.RUNNING.value,
                selection=filters.to_args(),
                description=description,
                reason=clean,
                rate_per_minute=rate,
                stop_failures=stop_rule.failures,
                stop_window=stop_rule.window,
                total=0,
                next_at=now,
                created_by=actor,
                created_at=now,
                changed_by=actor,
                changed_at=now,
            )
            .returning(redrives.c.id)
        ).scalar_one()
        chosen = candidates(
            conn, filters, now, sa.literal(redrive_id, type_=redrive_items.c.redrive_id.type)
        )
        total = conn.execute(
            sa.insert(redrive_items).from_select(["redrive_id", "job_id"], chosen),
            execution_options={"preserve_rowcount": True},
        ).rowcount
        if not total:
            raise ValidationError(
                "selection",
                f"no dead job that needs a decision matches {description} (or another "
                "running or paused redrive already holds them); nothing was started",
            )
        conn.execute(sa.update(redrives).where(redrives.c.id == redrive_id).values(total=total))
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.REDRIVE_START,
        subject=subject_of(redrive_id),
        reason=clean,
        details={
            "selection": filters.to_args(),
            "description": description,
            "jobs": total,
            "capped": total == REDRIVE_CAP,
            "rate_per_minute": rate,
            "stop_rule": f"{stop_rule.failures}/{stop_rule.window}",
        },
        now=now,
    )
    return int(redrive_id)


def _change(
    conn: sa.Connection,
    redrive_id: int,
    *,
    allowed: Iterable[RedriveState],
    to: RedriveState,
    verb: str,
    actor: str,
    reason: str | None,
    now: datetime,
    action: AuditAction,
    extra: dict[str, Any] | None = None,
) -> None:
    """The compare-and-set from one of `allowed` to `to`, and its audit row."""
    allowed_values = [state.value for state in allowed]
    values: dict[str, Any] = {
        "state": to.value,
        "changed_by": actor,
        "changed_at": now,
        "change_reason": reason,
        **(extra or {}),
    }
    changed = conn.execute(
        sa.update(redrives)
        .where(redrives.c.id == redrive_id, redrives.c.state.in_(allowed_values))
        .values(**values)
        .returning(redrives.c.state, redrives.c.requeued, redrives.c.total)
    ).first()
    if changed is None:
        current = conn.execute(
            sa.select(redrives.c.state).where(redrives.c.id == redrive_id)
        ).scalar_one_or_none()
        if current is None:
            raise NotFoundError(f"redrive #{redrive_id} does not exist")
        only = " or ".join(allowed_values)
        raise ConflictError(
            f"redrive #{redrive_id} is {current}; only a {only} redrive can be {verb}"
        )
    audit.record(
        conn,
        actor=actor,
        action=action,
        subject=subject_of(redrive_id),
        reason=reason,
        details={"requeued": changed.requeued, "jobs": changed.total},
        now=now,
    )


def pause_redrive(
    conn: sa.Connection, redrive_id: int, *, actor: str, reason: str | None, now: datetime
) -> None:
    """Stop requeueing until resumed (the reason is required, as for every pause); the
    new jobs' outcomes are still tallied meanwhile."""
    clean = check_reason(reason, required=True)
    _change(
        conn,
        redrive_id,
        allowed=(RedriveState.RUNNING,),
        to=RedriveState.PAUSED,
        verb="paused",
        actor=actor,
        reason=clean,
        now=now,
        action=AuditAction.REDRIVE_PAUSE,
    )


def resume_redrive(
    conn: sa.Connection, redrive_id: int, *, actor: str, reason: str | None = None, now: datetime
) -> None:
    """Requeue again at the redrive's pace, counted from now (a long pause does not
    turn into a burst)."""
    clean = check_reason(reason, required=False)
    _change(
        conn,
        redrive_id,
        allowed=(RedriveState.PAUSED,),
        to=RedriveState.RUNNING,
        verb="resumed",
        actor=actor,
        reason=clean,
        now=now,
        action=AuditAction.REDRIVE_RESUME,
        extra={"next_at": now},
    )


def cancel_redrive(
    conn: sa.Connection, redrive_id: int, *, actor: str, reason: str | None, now: datetime
) -> None:
    """End a running or paused redrive for good (the reason is required): the dead jobs
    it had not reached stay dead, waiting for a decision; the new jobs it made run on."""
    clean = check_reason(reason, required=True)
    _change(
        conn,
        redrive_id,
        allowed=ACTIVE_STATES,
        to=RedriveState.CANCELLED,
        verb="cancelled",
        actor=actor,
        reason=clean,
        now=now,
        action=AuditAction.REDRIVE_CANCEL,
        extra={"finished_at": now},
    )
