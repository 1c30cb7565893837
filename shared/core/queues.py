"""Pausing a queue (R26): what on-call does when a downstream system is on fire.

A paused queue is a row in `jobdesk_queue_pauses`. The claim itself skips queues that
have one (`jobdesk.shared.core.claim`), so a pause holds from the next claim of every
worker on every host — there is no cache to go stale — and the waiting jobs keep their
attempts: nothing is claimed, nothing is counted. Jobs already running finish.

Pausing names who and why (the reason is required and shown to everyone); both
directions are audited in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import queue_pauses
from jobdesk.shared.core.validation import check_name, check_reason

_p = queue_pauses.c


@dataclass(frozen=True, slots=True)
class QueuePause:
    queue: str
    paused_by: str
    paused_at: datetime
    reason: str


def paused_queues(conn: sa.Connection) -> dict[str, QueuePause]:
    """Every paused queue, by name."""
    rows = conn.execute(sa.select(_p.queue, _p.paused_by, _p.paused_at, _p.reason))
    return {row.queue: QueuePause(*row) for row in rows}


def pause_queue(
    conn: sa.Connection, queue: str, *, actor: str, reason: str | None, now: datetime
) -> QueuePause:
    """Stop every worker from claiming `queue`'s jobs until it is resumed. A queue that
    has no jobs yet may be paused too (before a deploy that would fill it)."""
    name = check_name("queue", queue)
    clean = check_reason(reason, required=True)
    assert clean is not None
    existing = paused_queues(conn).get(name)
    if existing is not None:
        raise ValidationError(
            "queue",
            f"{name} is already paused (by {existing.paused_by} since "
            f"{existing.paused_at:%Y-%m-%d %H:%M} UTC: {existing.reason})",
        )
    try:
        with conn.begin_nested():
            conn.execute(
                sa.insert(queue_pauses).values(
                    queue=name, paused_by=actor, paused_at=now, reason=clean
                )
            )
    except sa.exc.IntegrityError:  # paused by someone else a moment ago
        raise ValidationError("queue", f"{name} is already paused") from None
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.QUEUE_PAUSE,
        subject=f"queue:{name}",
        reason=clean,
        now=now,
    )
    return QueuePause(name, actor, now, clean)


def resume_queue(
    conn: sa.Connection, queue: str, *, actor: str, reason: str | None = None, now: datetime
) -> QueuePause:
    """Let workers claim `queue` again; returns the pause that ended."""
    name = check_name("queue", queue)
    clean = check_reason(reason, required=False)
    ended = conn.execute(
        sa.delete(queue_pauses)
        .where(_p.queue == name)
        .returning(_p.queue, _p.paused_by, _p.paused_at, _p.reason)
    ).first()
    if ended is None:
        raise ValidationError("queue", f"{name} is not paused")
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.QUEUE_RESUME,
        subject=f"queue:{name}",
        reason=clean,
        details={"paused_by": ended.paused_by, "paused_reason": ended.reason},
        now=now,
    )
    return QueuePause(*ended)
