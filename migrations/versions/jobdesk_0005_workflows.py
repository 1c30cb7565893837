"""Batches, dependencies and waiting jobs: `jobdesk_batches`, `jobdesk_job_dependencies`,
the job columns `batch_id`, `waiting_for`, `watched`, the `waiting` status, the settle
triggers and the `batch.cancel` audit action.

Revision ID: jobdesk_0005
Revises: jobdesk_0004
Create Date: 2026-12-13 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types
from jobdesk.shared.workflows import settle

revision: str = "jobdesk_0005"
down_revision: str | None = "jobdesk_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_STATUSES_BEFORE = "status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')"
_STATUSES_AFTER = (
    "status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled', 'waiting')"
)
_ACTIONS_BEFORE = (
    "alert.acknowledge",
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
_ACTIONS_AFTER = tuple(sorted((*_ACTIONS_BEFORE, "batch.cancel")))


def _set_actions(actions: Sequence[str]) -> None:
    # SQLite cannot alter a constraint: batch mode copies the table (it is small).
    with op.batch_alter_table("jobdesk_audit_log") as batch:
        batch.drop_constraint(op.f("ck_jobdesk_audit_log_action"), type_="check")
        batch.create_check_constraint(
            "action", "action IN (" + ", ".join(f"'{a}'" for a in actions) + ")"
        )


def _set_statuses(before: str, after: str) -> None:
    """The jobs table's status CHECK, without copying the table (it may be large).

    PostgreSQL: the new constraint is added NOT VALID (no scan under the exclusive lock)
    and validated after. SQLite cannot alter a constraint, and rebuilding the jobs table
    would copy every job: its stored CREATE TABLE text is edited in place instead, the
    procedure SQLite documents for constraint changes that existing rows satisfy (the
    new list only adds a value), with the schema version bumped so every connection
    reads the new text."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE jobdesk_jobs DROP CONSTRAINT ck_jobdesk_jobs_status")
        op.execute(
            f"ALTER TABLE jobdesk_jobs ADD CONSTRAINT ck_jobdesk_jobs_status CHECK ({after}) "
            "NOT VALID"
        )
        op.execute("ALTER TABLE jobdesk_jobs VALIDATE CONSTRAINT ck_jobdesk_jobs_status")
        return
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        changed = bind.exec_driver_sql(
            "UPDATE sqlite_master SET sql = replace(sql, ?, ?) "
            "WHERE type = 'table' AND name = 'jobdesk_jobs' AND instr(sql, ?) > 0",
            (before, after, before),
        ).rowcount
        if changed != 1:
            raise RuntimeError("jobdesk_jobs: its status constraint is not the expected one")
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    op.create_table(
        "jobdesk_batches",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.Column(
            "finished_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("finished", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("succeeded", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("on_success_job_id", _Id, nullable=True),
        sa.Column("on_finish_job_id", _Id, nullable=True),
        sa.Column(
            "cancelled_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("cancelled_by", sa.String(length=100), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "total >= 0 AND finished >= 0 AND succeeded >= 0 AND succeeded <= finished",
            name=op.f("ck_jobdesk_batches_counts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_batches")),
    )
    op.create_index("ix_jobdesk_batches_created_at", "jobdesk_batches", ["created_at"])
    for column in ("on_success_job_id", "on_finish_job_id"):
        op.create_index(
            f"ix_jobdesk_batches_{column}",
            "jobdesk_batches",
            [column],
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
            sqlite_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_table(
        "jobdesk_job_dependencies",
        sa.Column("job_id", _Id, nullable=False),
        sa.Column("depends_on_id", _Id, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobdesk_jobs.id"],
            name=op.f("fk_jobdesk_job_dependencies_job_id_jobdesk_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "job_id", "depends_on_id", name=op.f("pk_jobdesk_job_dependencies")
        ),
    )
    op.create_index(
        "ix_jobdesk_job_dependencies_depends_on_id",
        "jobdesk_job_dependencies",
        ["depends_on_id", "job_id"],
    )
    # Plain ADD COLUMNs (no table copy on SQLite; no rewrite on PostgreSQL: constant
    # defaults).
    op.add_column("jobdesk_jobs", sa.Column("batch_id", _Id, nullable=True))
    op.add_column("jobdesk_jobs", sa.Column("waiting_for", sa.Integer(), nullable=True))
    op.add_column(
        "jobdesk_jobs",
        sa.Column("watched", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.create_index(
        "ix_jobdesk_jobs_batch_id",
        "jobdesk_jobs",
        ["batch_id", "status", "id"],
        postgresql_where=sa.text("batch_id IS NOT NULL"),
        sqlite_where=sa.text("batch_id IS NOT NULL"),
    )
    _set_statuses(_STATUSES_BEFORE, _STATUSES_AFTER)
    _set_actions(_ACTIONS_AFTER)
    for statement in settle.ddl(op.get_bind()):
        op.execute(statement)


def downgrade() -> None:
    for statement in settle.drop_ddl(op.get_bind()):
        op.execute(statement)
    op.execute(sa.text("DELETE FROM jobdesk_audit_log WHERE action = 'batch.cancel'"))
    _set_actions(_ACTIONS_BEFORE)
    op.execute(sa.text("UPDATE jobdesk_jobs SET status = 'cancelled' WHERE status = 'waiting'"))
    _set_statuses(_STATUSES_AFTER, _STATUSES_BEFORE)
    op.drop_index("ix_jobdesk_jobs_batch_id", table_name="jobdesk_jobs")
    with op.batch_alter_table("jobdesk_jobs", recreate="never") as batch:
        batch.drop_column("watched")
        batch.drop_column("waiting_for")
        batch.drop_column("batch_id")
    op.drop_table("jobdesk_job_dependencies")
    op.drop_table("jobdesk_batches")
