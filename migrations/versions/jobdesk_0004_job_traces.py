"""Job traces: `jobdesk_job_traces`, the W3C trace context a job was enqueued in.

Revision ID: jobdesk_0004
Revises: jobdesk_0003
Create Date: 2026-12-12 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types

revision: str = "jobdesk_0004"
down_revision: str | None = "jobdesk_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobdesk_job_traces",
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("traceparent", sa.String(length=64), nullable=False),
        sa.Column("tracestate", sa.String(length=512), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobdesk_jobs.id"],
            name=op.f("fk_jobdesk_job_traces_job_id_jobdesk_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobdesk_job_traces")),
    )


def downgrade() -> None:
    op.drop_table("jobdesk_job_traces")
