"""Quarantine holds: `jobdesk_holds`, the job column `held_by`, the hold triggers (and
the slot functions as they stand now).

Revision ID: jobdesk_0008
Revises: jobdesk_0007
Create Date: 2026-12-16 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import jobdesk.shared.core.driver.types
from jobdesk.shared.flow import holds

revision: str = "jobdesk_0008"
down_revision: str | None = "jobdesk_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HELD = "held_by IS NOT NULL"
_ACTIONS_BEFORE = (
    "alert.acknowledge",
    "batch.cancel",
    "breaker.close",
    "breaker.open",
    "cancel",
    "endpoint.add",
    "endpoint.disable",
    "endpoint.pause",
    "endpoint.resume",
    "endpoint.rotate_secret",
    "endpoint.set_url",
    "fix_retry",
    "ignore",
    "operator.add",
    "operator.disable",
    "operator.enable",
    "operator.password",
    "operator.role",
    "queue.pause",
    "queue.resume",
    "report.cancel",
    "report.retry_chunk",
    "retry",
    "schedule.pause",
    "schedule.resume",
    "schedule.run",
    "secret.reveal",
)
_ACTIONS_AFTER = tuple(sorted((*_ACTIONS_BEFORE, "hold.add", "hold.release")))


def _set_actions(actions: Sequence[str]) -> None:
    # SQLite cannot alter a constraint: batch mode copies the table (it is small).
    with op.batch_alter_table("jobdesk_audit_log") as batch:
        batch.drop_constraint(op.f("ck_jobdesk_audit_log_action"), type_="check")
        batch.create_check_constraint(
            "action", "action IN (" + ", ".join(f"'{a}'" for a in actions) + ")"
        )


_ACTIVE = "released_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "jobdesk_holds",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("match", sa.String(length=20), nullable=False),
        sa.Column("path", sa.String(length=200), nullable=True),
        sa.Column("value", sa.String(length=200), nullable=False),
        sa.Column(
            "candidates",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "until", jobdesk.shared.core.driver.types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column(
            "released_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("released_by", sa.String(length=100), nullable=True),
        sa.CheckConstraint(
            "match IN ('concurrency_key', 'group_key', 'payload')",
            name=op.f("ck_jobdesk_holds_match"),
        ),
        sa.CheckConstraint(
            "(match = 'payload') = (path IS NOT NULL AND candidates IS NOT NULL)",
            name=op.f("ck_jobdesk_holds_path"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_holds")),
    )
    op.create_index(
        "ix_jobdesk_holds_active",
        "jobdesk_holds",
        ["match", "value"],
        postgresql_where=sa.text(_ACTIVE),
        sqlite_where=sa.text(_ACTIVE),
    )
    # A plain ADD COLUMN: no table copy on SQLite, no rewrite on PostgreSQL.
    op.add_column(
        "jobdesk_jobs",
        sa.Column("held_by", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
    )
    op.create_index(
        "ix_jobdesk_jobs_held_by",
        "jobdesk_jobs",
        ["held_by", "id"],
        postgresql_where=sa.text(_HELD),
        sqlite_where=sa.text(_HELD),
    )
    _set_actions(_ACTIONS_AFTER)
    for statement in holds.ddl(op.get_bind()):
        op.execute(statement)


def downgrade() -> None:
    for statement in holds.drop_ddl(op.get_bind()):
        op.execute(statement)
    # Held jobs go back in line: without holds nothing would ever release them.
    op.execute(
        sa.text(
            "UPDATE jobdesk_jobs SET status = 'queued', held_by = NULL WHERE held_by IS NOT NULL"
        )
    )
    op.execute(sa.text("DELETE FROM jobdesk_audit_log WHERE action LIKE 'hold.%'"))
    _set_actions(_ACTIONS_BEFORE)
    op.drop_index("ix_jobdesk_jobs_held_by", table_name="jobdesk_jobs")
    with op.batch_alter_table("jobdesk_jobs", recreate="never") as batch:
        batch.drop_column("held_by")
    op.drop_index("ix_jobdesk_holds_active", table_name="jobdesk_holds")
    op.drop_table("jobdesk_holds")
