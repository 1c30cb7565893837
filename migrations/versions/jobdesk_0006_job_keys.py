"""Keys that deduplicate for a while (`unique_for`, `debounce`): `jobdesk_job_keys`.

Revision ID: jobdesk_0006
Revises: jobdesk_0005
Create Date: 2026-12-14 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types

revision: str = "jobdesk_0006"
down_revision: str | None = "jobdesk_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobdesk_job_keys",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("job_id", _Id, nullable=True),
        sa.Column(
            "expires_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobdesk_jobs.id"],
            name=op.f("fk_jobdesk_job_keys_job_id_jobdesk_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_jobdesk_job_keys")),
    )
    op.create_index("ix_jobdesk_job_keys_job_id", "jobdesk_job_keys", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_jobdesk_job_keys_job_id", table_name="jobdesk_job_keys")
    op.drop_table("jobdesk_job_keys")
