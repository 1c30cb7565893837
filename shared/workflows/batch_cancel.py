"""Cancelling a batch as a whole: its children not started are cancelled, running ones
are asked to stop, and `on_success` is cancelled (the batch can no longer all succeed);
`on_finish` still runs once every child is final — the settle triggers release it in
the transaction of the last cancel or outcome. Audited as `batch.cancel` and, for each
job, as its cancel."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core import audit, decisions
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import CANCELLABLE, STOPPABLE, sql_values
from jobdesk.shared.workflows.models import batches


def cancel_batch(
    conn: sa.Connection, batch_id: int, *, actor: str, reason: str, now: datetime
) -> dict[str, list[int]]:
    """Cancel a batch (see the module), audited as `batch.cancel` and each job's cancel;
    `{"cancelled": [...], "asked": [...]}`. `LookupError` for an unknown batch."""
    row = conn.execute(
        sa.select(batches.c.on_success_job_id, batches.c.cancelled_at)
        .where(batches.c.id == batch_id)
        .with_for_update()
    ).first()
    if row is None:
        raise LookupError(f"batch {batch_id} does not exist")
    children = sa.select(jobs.c.id).where(jobs.c.batch_id == batch_id)
    waiting_or_queued = list(
        conn.execute(children.where(jobs.c.status.in_(sql_values(CANCELLABLE)))).scalars()
    )
    if row.on_success_job_id is not None:
        waiting_or_queued.append(int(row.on_success_job_id))
    subject = f"batch:{batch_id}"
    cancelled = decisions.cancel(
        conn, sorted(waiting_or_queued), actor=actor, reason=reason, now=now, subject=subject
    )
    running = list(conn.execute(children.where(jobs.c.status.in_(sql_values(STOPPABLE)))).scalars())
    asked = decisions.request_cancel(
        conn, running, actor=actor, reason=reason, now=now, subject=subject
    )
    if row.cancelled_at is None:
        conn.execute(
            sa.update(batches)
            .where(batches.c.id == batch_id)
            .values(cancelled_at=now, cancelled_by=actor, cancel_reason=reason)
        )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.BATCH_CANCEL,
        subject=subject,
        reason=reason,
        details={"cancelled": len(cancelled), "asked_to_stop": len(asked)},
        now=now,
    )
    return {"cancelled": cancelled, "asked": asked}
