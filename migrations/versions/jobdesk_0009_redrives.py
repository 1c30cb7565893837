"""Paced redrives: `jobdesk_redrives`, `jobdesk_redrive_items` and the `redrive.*` audit
actions.

Revision ID: jobdesk_0009
Revises: jobdesk_0008
Create Date: 2026-12-16 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import jobdesk.shared.core.driver.types

revision: str = "jobdesk_0009"
down_revision: str | None = "jobdesk_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_ACTIVE = "state IN ('running', 'paused')"
_AWAITING = "new_job_id IS NOT NULL AND outcome IS NULL"
_JUDGED = "judged_at IS NOT NULL"
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
    "hold.add",
    "hold.release",
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
_REDRIVE_ACTIONS = (
    "redrive.cancel",
    "redrive.finish",
    "redrive.pause",
    "redrive.resume",
    "redrive.start",
    "redrive.stop",
)
_ACTIONS_AFTER = tuple(sorted((*_ACTIONS_BEFORE, *_REDRIVE_ACTIONS)))


def _set_actions(actions: Sequence[str]) -> None:
    # SQLite cannot alter a constraint: batch mode copies the table (it is small).
    with op.batch_alter_table("jobdesk_audit_log") as batch:
        batch.drop_constraint(op.f("ck_jobdesk_audit_log_action"), type_="check")
        batch.create_check_constraint(
            "action", "action IN (" + ", ".join(f"'{a}'" for a in actions) + ")"
        )


def _timestamp(name: str, *, nullable: bool = True, now: bool = False) -> sa.Column:
    return sa.Column(
        name,
        jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
        server_default=jobdesk.shared.core.driver.types.utcnow() if now else None,
        nullable=nullable,
    )


def _counter(name: str) -> sa.Column:
    return sa.Column(name, sa.Integer(), server_default=sa.text("0"), nullable=False)


def upgrade() -> None:
    op.create_table(
        "jobdesk_redrives",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("state", sa.String(length=16), server_default="running", nullable=False),
        sa.Column("selection", _JSON, nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("rate_per_minute", sa.Integer(), nullable=False),
        sa.Column("stop_failures", sa.Integer(), nullable=False),
        sa.Column("stop_window", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        _counter("requeued"),
        _counter("skipped"),
        _counter("succeeded"),
        _counter("failed"),
        _counter("undecided"),
        sa.Column("cursor_job_id", _Id, server_default=sa.text("0"), nullable=False),
        _timestamp("next_at", nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        _timestamp("created_at", nullable=False, now=True),
        sa.Column("changed_by", sa.String(length=100), nullable=True),
        _timestamp("changed_at"),
        sa.Column("change_reason", sa.Text(), nullable=True),
        sa.Column("stopped_reason", sa.Text(), nullable=True),
        _timestamp("finished_at"),
        sa.CheckConstraint(
            "state IN ('cancelled', 'finished', 'paused', 'running', 'stopped')",
            name=op.f("ck_jobdesk_redrives_state"),
        ),
        sa.CheckConstraint(
            "rate_per_minute BETWEEN 1 AND 10000", name=op.f("ck_jobdesk_redrives_rate_per_minute")
        ),
        sa.CheckConstraint(
            "stop_failures >= 1 AND stop_failures <= stop_window AND stop_window <= 1000",
            name=op.f("ck_jobdesk_redrives_stop_rule"),
        ),
        sa.CheckConstraint(
            "total >= 0 AND requeued >= 0 AND skipped >= 0 AND requeued + skipped <= total "
            "AND succeeded >= 0 AND failed >= 0 AND undecided >= 0 "
            "AND succeeded + failed + undecided <= requeued",
            name=op.f("ck_jobdesk_redrives_counts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobdesk_redrives")),
    )
    op.create_index(
        "ix_jobdesk_redrives_active",
        "jobdesk_redrives",
        ["id"],
        postgresql_where=sa.text(_ACTIVE),
        sqlite_where=sa.text(_ACTIVE),
    )
    op.create_table(
        "jobdesk_redrive_items",
        sa.Column("redrive_id", _Id, nullable=False),
        sa.Column("job_id", _Id, nullable=False),
        sa.Column("new_job_id", _Id, nullable=True),
        _timestamp("requeued_at"),
        sa.Column("skipped", sa.String(length=16), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        _timestamp("judged_at"),
        sa.CheckConstraint(
            "skipped IS NULL OR skipped IN ('resolved', 'unknown_type')",
            name=op.f("ck_jobdesk_redrive_items_skipped"),
        ),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN ('succeeded', 'failed', 'cancelled', 'gone')",
            name=op.f("ck_jobdesk_redrive_items_outcome"),
        ),
        sa.ForeignKeyConstraint(
            ["redrive_id"],
            ["jobdesk_redrives.id"],
            name=op.f("fk_jobdesk_redrive_items_redrive_id_jobdesk_redrives"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("redrive_id", "job_id", name=op.f("pk_jobdesk_redrive_items")),
    )
    op.create_index(
        "ix_jobdesk_redrive_items_awaiting",
        "jobdesk_redrive_items",
        ["redrive_id", "job_id"],
        postgresql_where=sa.text(_AWAITING),
        sqlite_where=sa.text(_AWAITING),
    )
    op.create_index(
        "ix_jobdesk_redrive_items_judged",
        "jobdesk_redrive_items",
        ["redrive_id", "judged_at"],
        postgresql_where=sa.text(_JUDGED),
        sqlite_where=sa.text(_JUDGED),
    )
    op.create_index("ix_jobdesk_redrive_items_job_id", "jobdesk_redrive_items", ["job_id"])
    _set_actions(_ACTIONS_AFTER)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM jobdesk_audit_log WHERE action LIKE 'redrive.%'"))
    _set_actions(_ACTIONS_BEFORE)
    op.drop_index("ix_jobdesk_redrive_items_job_id", table_name="jobdesk_redrive_items")
    op.drop_index("ix_jobdesk_redrive_items_judged", table_name="jobdesk_redrive_items")
    op.drop_index("ix_jobdesk_redrive_items_awaiting", table_name="jobdesk_redrive_items")
    op.drop_table("jobdesk_redrive_items")
    op.drop_index("ix_jobdesk_redrives_active", table_name="jobdesk_redrives")
    op.drop_table("jobdesk_redrives")
