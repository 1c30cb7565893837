"""The audit trail's vocabulary and its writer: who did what to which job, and why.

Every operator decision (a retry, a fix, an ignore, a cancel, a pause, an account
change) appends its rows here *in the transaction of the change itself*, so a decision
and its record commit or roll back together. `AuditAction` is the one list of action
names: the CHECK constraint on `jobdesk_audit_log.action`, the audit page's filter and
every writer use it. Nothing updates or deletes rows (except retention, when configured).
`details` arrive already masked (payload diffs go through `core.masking`).

The read side (filters, pages) is `operator.audit`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, in_list, table_of

__all__ = ["AuditAction", "AuditEntry", "audit_log", "record", "record_many"]


class AuditAction(StrEnum):
    """Every action name written to the audit trail."""

    RETRY = "retry"
    FIX_RETRY = "fix_retry"
    IGNORE = "ignore"
    CANCEL = "cancel"
    ALERT_ACKNOWLEDGE = "alert.acknowledge"
    ENDPOINT_ADD = "endpoint.add"
    ENDPOINT_SET_URL = "endpoint.set_url"
    ENDPOINT_PAUSE = "endpoint.pause"
    ENDPOINT_RESUME = "endpoint.resume"
    ENDPOINT_DISABLE = "endpoint.disable"
    ENDPOINT_ROTATE_SECRET = "endpoint.rotate_secret"  # noqa: S105 (an action name)
    BREAKER_OPEN = "breaker.open"
    BREAKER_CLOSE = "breaker.close"
    OPERATOR_ADD = "operator.add"
    OPERATOR_DISABLE = "operator.disable"
    OPERATOR_ENABLE = "operator.enable"
    OPERATOR_PASSWORD = "operator.password"  # noqa: S105 (an action name)
    OPERATOR_ROLE = "operator.role"
    REPORT_RETRY_CHUNK = "report.retry_chunk"
    REPORT_CANCEL = "report.cancel"
    SCHEDULE_PAUSE = "schedule.pause"
    SCHEDULE_RESUME = "schedule.resume"
    SCHEDULE_RUN = "schedule.run"
    QUEUE_PAUSE = "queue.pause"
    QUEUE_RESUME = "queue.resume"
    SECRET_REVEAL = "secret.reveal"  # noqa: S105 (an action name)
    BATCH_CANCEL = "batch.cancel"
    HOLD_ADD = "hold.add"
    HOLD_RELEASE = "hold.release"
    REDRIVE_START = "redrive.start"
    REDRIVE_PAUSE = "redrive.pause"
    REDRIVE_RESUME = "redrive.resume"
    REDRIVE_CANCEL = "redrive.cancel"
    REDRIVE_STOP = "redrive.stop"
    REDRIVE_FINISH = "redrive.finish"


class AuditEntry(Base):
    """Append-only record of operator actions, written in the action's own transaction."""

    __tablename__ = "jobdesk_audit_log"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(server_default=utcnow())
    actor: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    action: Mapped[str] = mapped_column(sa.String(50))
    job_id: Mapped[int | None] = mapped_column(BigId)
    new_job_id: Mapped[int | None] = mapped_column(BigId)
    subject: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    reason: Mapped[str | None] = mapped_column(sa.Text)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)

    __table_args__ = (
        sa.CheckConstraint(in_list("action", sorted(AuditAction)), name="action"),
        sa.Index("ix_jobdesk_audit_log_job_id", "job_id"),
        sa.Index("ix_jobdesk_audit_log_at", "at"),
        sa.Index("ix_jobdesk_audit_log_actor_at", "actor", "at"),
    )


audit_log = table_of(AuditEntry)


def record(
    conn: sa.Connection,
    *,
    actor: str,
    action: AuditAction,
    now: datetime,
    job_id: int | None = None,
    new_job_id: int | None = None,
    subject: str | None = None,
    reason: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> None:
    """Append one entry in the caller's transaction."""
    record_many(
        conn,
        [
            {
                "actor": actor,
                "action": action,
                "job_id": job_id,
                "new_job_id": new_job_id,
                "subject": subject,
                "reason": reason,
                "details": dict(details) if details is not None else None,
            }
        ],
        now=now,
    )


def record_many(conn: sa.Connection, entries: Iterable[Mapping[str, Any]], *, now: datetime) -> int:
    """Append many entries with one multi-row INSERT; returns how many were written."""
    rows = [
        {
            "at": now,
            "actor": entry["actor"],
            "action": AuditAction(entry["action"]).value,
            "job_id": entry.get("job_id"),
            "new_job_id": entry.get("new_job_id"),
            "subject": entry.get("subject"),
            "reason": entry.get("reason"),
            "details": entry.get("details"),
        }
        for entry in entries
    ]
    if rows:
        conn.execute(sa.insert(audit_log), rows)
    return len(rows)
