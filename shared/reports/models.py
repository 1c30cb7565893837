"""Report tables: runs and the chunk results kept until assembly."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, in_list, table_of


class ReportRunStatus(StrEnum):
    """A report run's life: chunks run, one assembles, then a final state."""

    RUNNING = "running"
    ASSEMBLING = "assembling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReportRun(Base):
    """One requested report: its fan-out progress and where the result lives."""

    __tablename__ = "jobdesk_report_runs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[int | None] = mapped_column(BigId)
    report: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    params: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    requested_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    status: Mapped[str] = mapped_column(sa.String(16), server_default=ReportRunStatus.RUNNING.value)
    chunks_total: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    chunks_done: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    rows: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    file_path: Mapped[str | None] = mapped_column(sa.Text)
    size_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    finished_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]

    __table_args__ = (
        sa.CheckConstraint(in_list("status", sorted(ReportRunStatus)), name="status"),
    )


class ReportChunkResult(Base):
    """The output of one report chunk, kept until the run is assembled."""

    __tablename__ = "jobdesk_report_chunk_results"

    run_id: Mapped[int] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_report_runs.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_index: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    rows: Mapped[int] = mapped_column(sa.Integer)
    data: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())


report_runs = table_of(ReportRun)
report_chunk_results = table_of(ReportChunkResult)
