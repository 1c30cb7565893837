"""The tables of batches and dependencies (`jobdesk_batches`, `jobdesk_job_dependencies`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, table_of

#: How long a batch's name may be.
BATCH_NAME_LENGTH = 200


class Batch(Base):
    """A set of jobs enqueued together, and what runs when they are done.

    `total`, `finished` and `succeeded` are counters the settle triggers keep in the
    transaction of each child's outcome: the one that brings `finished` to `total`
    releases `on_finish_job_id`, the one that brings `succeeded` to `total` releases
    `on_success_job_id` (both `waiting` jobs until then). A triage retry of a dead child
    takes its place: the dead one stops counting as finished."""

    __tablename__ = "jobdesk_batches"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str | None] = mapped_column(sa.String(BATCH_NAME_LENGTH))
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    #: When the last child became final (again None while a retried child runs).
    finished_at: Mapped[datetime | None]
    total: Mapped[int] = mapped_column(sa.Integer)
    finished: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    succeeded: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    on_success_job_id: Mapped[int | None] = mapped_column(BigId)
    on_finish_job_id: Mapped[int | None] = mapped_column(BigId)
    cancelled_at: Mapped[datetime | None]
    cancelled_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    cancel_reason: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.CheckConstraint(
            "total >= 0 AND finished >= 0 AND succeeded >= 0 AND succeeded <= finished",
            name="counts",
        ),
        sa.Index("ix_jobdesk_batches_created_at", "created_at"),
        # `ctx.batch` of a callback: which batch it completes.
        sa.Index(
            "ix_jobdesk_batches_on_success_job_id",
            "on_success_job_id",
            postgresql_where=sa.text("on_success_job_id IS NOT NULL"),
            sqlite_where=sa.text("on_success_job_id IS NOT NULL"),
        ),
        sa.Index(
            "ix_jobdesk_batches_on_finish_job_id",
            "on_finish_job_id",
            postgresql_where=sa.text("on_finish_job_id IS NOT NULL"),
            sqlite_where=sa.text("on_finish_job_id IS NOT NULL"),
        ),
    )


class JobDependency(Base):
    """`job_id` runs once `depends_on_id` succeeded. No foreign key on the dependency: a
    succeeded job may be pruned while its dependents are long done; the dependent's
    rows go with it."""

    __tablename__ = "jobdesk_job_dependencies"

    job_id: Mapped[int] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    depends_on_id: Mapped[int] = mapped_column(BigId, primary_key=True)

    __table_args__ = (
        sa.Index("ix_jobdesk_job_dependencies_depends_on_id", "depends_on_id", "job_id"),
    )


batches = table_of(Batch)
job_dependencies = table_of(JobDependency)
