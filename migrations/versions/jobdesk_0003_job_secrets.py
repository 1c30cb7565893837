"""Job secrets: `jobdesk_job_secrets` (sealed values, deleted with their job) and the
`secret.reveal` audit action.

Revision ID: jobdesk_0003
Revises: jobdesk_0002
Create Date: 2026-12-12 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import jobdesk.shared.core.driver.types

revision: str = "jobdesk_0003"
down_revision: str | None = "jobdesk_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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
)
_ACTIONS_AFTER = tuple(sorted((*_ACTIONS_BEFORE, "secret.reveal")))


def _actions_check(actions: Sequence[str]) -> str:
    return "action IN (" + ", ".join(f"'{action}'" for action in actions) + ")"


def _set_actions(actions: Sequence[str]) -> None:
    # SQLite cannot alter a constraint: batch mode copies the table (it is small).
    with op.batch_alter_table("jobdesk_audit_log") as batch:
        batch.drop_constraint(op.f("ck_jobdesk_audit_log_action"), type_="check")
        batch.create_check_constraint("action", _actions_check(actions))


def upgrade() -> None:
    op.create_table(
        "jobdesk_job_secrets",
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            jobdesk.shared.core.driver.types.UTCDateTime(timezone=True),
            server_default=jobdesk.shared.core.driver.types.utcnow(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobdesk_jobs.id"],
            name=op.f("fk_jobdesk_job_secrets_job_id_jobdesk_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "name", name=op.f("pk_jobdesk_job_secrets")),
    )
    _set_actions(_ACTIONS_AFTER)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM jobdesk_audit_log WHERE action = 'secret.reveal'"))
    _set_actions(_ACTIONS_BEFORE)
    op.drop_table("jobdesk_job_secrets")
