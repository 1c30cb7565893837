"""Tombstones: what is kept of a pruned job so lineage and the audit trail stay readable."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, table_of


class JobTombstone(Base):
    """A pruned job that someone acted on or that retried another: its id, type, final
    state and the decision made about it (who, when, why)."""

    __tablename__ = "jobdesk_job_tombstones"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    job_type: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    queue: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    status: Mapped[str] = mapped_column(sa.String(16))
    attempts: Mapped[int] = mapped_column(sa.Integer)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    retried_from_id: Mapped[int | None] = mapped_column(BigId)
    resolution: Mapped[str | None] = mapped_column(sa.String(16))
    resolved_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    resolved_at: Mapped[datetime | None]
    resolution_reason: Mapped[str | None] = mapped_column(sa.Text)
    pruned_at: Mapped[datetime]

    __table_args__ = (
        sa.Index("ix_jobdesk_job_tombstones_retried_from_id", "retried_from_id"),
        sa.Index("ix_jobdesk_job_tombstones_pruned_at", "pruned_at"),
    )


job_tombstones = table_of(JobTombstone)
