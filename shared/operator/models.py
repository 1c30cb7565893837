"""The operator side's tables: the audit trail and dashboard accounts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, table_of
from jobdesk.shared.core.sqltypes import JSONDocument, utcnow


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
        sa.Index("ix_jobdesk_audit_log_job_id", "job_id"),
        sa.Index("ix_jobdesk_audit_log_at", "at"),
        sa.Index("ix_jobdesk_audit_log_actor_at", "actor", "at"),
    )


class Operator(Base):
    """A dashboard user with a role: viewer (read), operator (triage), admin (everything)."""

    __tablename__ = "jobdesk_operators"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    role: Mapped[str] = mapped_column(sa.String(16))
    disabled: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    last_login_at: Mapped[datetime | None]

    __table_args__ = (sa.CheckConstraint("role IN ('viewer', 'operator', 'admin')", name="role"),)


audit_log = table_of(AuditEntry)
operators = table_of(Operator)
