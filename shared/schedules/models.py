"""The schedules table: one row per declared schedule, with its next slot and last run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, table_of


class Schedule(Base):
    """A recurring job: what to enqueue (type + payload) and when (cron or every N s)."""

    __tablename__ = "jobdesk_schedules"

    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    job_type: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDocument, server_default=sa.text("'{}'"))
    #: A 5-field cron expression (minute hour day month weekday), or NULL for `every`.
    cron: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    every_seconds: Mapped[float | None] = mapped_column(sa.Float)
    timezone: Mapped[str] = mapped_column(sa.String(64), server_default="UTC")
    catch_up: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    #: The expression in words ("every day at 02:00 (Europe/Berlin)"), written by the
    #: worker that declared it, so the dashboard needs no scheduler library.
    description: Mapped[str] = mapped_column(sa.Text)
    next_run_at: Mapped[datetime]
    last_slot_at: Mapped[datetime | None]
    last_job_id: Mapped[int | None] = mapped_column(BigId)
    paused: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    paused_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    paused_at: Mapped[datetime | None]
    paused_reason: Mapped[str | None] = mapped_column(sa.Text)
    declared_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())

    __table_args__ = (
        sa.CheckConstraint("(cron IS NULL) <> (every_seconds IS NULL)", name="one_expression"),
        sa.CheckConstraint("every_seconds IS NULL OR every_seconds > 0", name="every"),
        sa.Index("ix_jobdesk_schedules_next_run_at", "next_run_at"),
    )


schedules = table_of(Schedule)
