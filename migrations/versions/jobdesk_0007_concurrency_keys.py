"""Per-key concurrency and fair turns: the job columns `concurrency_key` and
`concurrency_limit`, the published types' `concurrency`, `jobdesk_concurrency_keys` and
the slot triggers.

Revision ID: jobdesk_0007
Revises: jobdesk_0006
Create Date: 2026-12-15 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types
from jobdesk.shared.flow import concurrency

revision: str = "jobdesk_0007"
down_revision: str | None = "jobdesk_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SLOT_WAITING = "status = 'waiting' AND waiting_for = 0 AND concurrency_key IS NOT NULL"
_ACTIVE_KEYED = "concurrency_key IS NOT NULL AND status IN ('failed', 'queued', 'running')"


def upgrade() -> None:
    op.create_table(
        "jobdesk_concurrency_keys",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("slot_limit", sa.Integer(), nullable=True),
        sa.Column(
            "updated_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.CheckConstraint(
            "slot_limit IS NULL OR slot_limit > 0",
            name=op.f("ck_jobdesk_concurrency_keys_slot_limit"),
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_jobdesk_concurrency_keys")),
    )
    # Plain ADD COLUMNs: no table copy on SQLite, no rewrite on PostgreSQL.
    op.add_column(
        "jobdesk_jobs", sa.Column("concurrency_key", sa.String(length=200), nullable=True)
    )
    op.add_column(
        "jobdesk_jobs",
        sa.Column(
            "concurrency_limit",
            sa.Integer(),
            sa.CheckConstraint(
                "concurrency_limit IS NULL OR concurrency_limit > 0",
                name=op.f("ck_jobdesk_jobs_concurrency_limit"),
            ),
            nullable=True,
        ),
    )
    op.add_column("jobdesk_job_types", sa.Column("concurrency", sa.Integer(), nullable=True))
    op.create_index(
        "ix_jobdesk_jobs_slot_waiting",
        "jobdesk_jobs",
        ["concurrency_key", "priority", "id"],
        postgresql_where=sa.text(_SLOT_WAITING),
        sqlite_where=sa.text(_SLOT_WAITING),
    )
    op.create_index(
        "ix_jobdesk_jobs_concurrency_key",
        "jobdesk_jobs",
        ["concurrency_key", "status"],
        postgresql_where=sa.text(_ACTIVE_KEYED),
        sqlite_where=sa.text(_ACTIVE_KEYED),
    )
    for statement in concurrency.ddl(op.get_bind()):
        op.execute(statement)


def downgrade() -> None:
    for statement in concurrency.drop_ddl(op.get_bind()):
        op.execute(statement)
    # Jobs waiting for a slot go back in line: without keys nothing holds them.
    op.execute(
        sa.text(
            "UPDATE jobdesk_jobs SET status = 'queued', waiting_for = NULL "
            "WHERE status = 'waiting' AND waiting_for = 0 AND concurrency_key IS NOT NULL"
        )
    )
    op.drop_index("ix_jobdesk_jobs_concurrency_key", table_name="jobdesk_jobs")
    op.drop_index("ix_jobdesk_jobs_slot_waiting", table_name="jobdesk_jobs")
    with op.batch_alter_table("jobdesk_job_types", recreate="never") as batch:
        batch.drop_column("concurrency")
    with op.batch_alter_table("jobdesk_jobs", recreate="never") as batch:
        batch.drop_column("concurrency_limit")
        batch.drop_column("concurrency_key")
    op.drop_table("jobdesk_concurrency_keys")
