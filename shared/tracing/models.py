"""`jobdesk_job_traces`: the W3C trace context (`traceparent`, `tracestate`) of the span
a job was enqueued in, only for jobs enqueued inside one. Deleted with its job."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import Base, BigId, table_of


class JobTrace(Base):
    """Where a job's trace continues: the producer span's context at enqueue."""

    __tablename__ = "jobdesk_job_traces"

    job_id: Mapped[int] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    #: `00-<trace id>-<span id>-<flags>` (55 characters).
    traceparent: Mapped[str] = mapped_column(sa.String(64))
    tracestate: Mapped[str | None] = mapped_column(sa.String(512))
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())


job_traces = table_of(JobTrace)
