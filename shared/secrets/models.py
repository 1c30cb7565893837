"""`jobdesk_job_secrets`: one row per secret of a job, its value sealed. Deleted with
its job (foreign key, `ON DELETE CASCADE`), so retention takes secrets along."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, table_of


class JobSecret(Base):
    """A job's secret: its name in clear (pages say which secrets a job has), its value
    sealed with the first key of `JOBDESK_ENCRYPTION_KEYS` at the time."""

    __tablename__ = "jobdesk_job_secrets"

    job_id: Mapped[int] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    sealed: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())


job_secrets = table_of(JobSecret)
