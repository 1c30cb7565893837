"""The app's tables, named like Jobdesk's used to be: jobs, users, alerts, workers."""

import sqlalchemy as sa
from alembic import op

revision = "12b684f79665"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("email", sa.String(200), nullable=False),
        sa.Column("greeted", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.String(200), nullable=False),
    )
    op.create_index("ix_jobs_title", "jobs", ["title"])
    op.create_table(
        "alerts", sa.Column("id", sa.Integer, primary_key=True), sa.Column("body", sa.Text)
    )
    op.create_table(
        "workers", sa.Column("id", sa.Integer, primary_key=True), sa.Column("name", sa.Text)
    )


def downgrade() -> None:
    for name in ("workers", "alerts", "jobs", "users"):
        op.drop_table(name)
