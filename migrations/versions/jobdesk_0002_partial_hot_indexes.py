"""Indexes that only ever look up non-NULL values leave NULL rows out.

Every claim and every completion writes a new row version, and each version gets an
entry in every index whose predicate it matches — a NULL key included. These five are
only ever searched for a value (`=`, `ILIKE`, a foreign key), never for NULL, so a
`… IS NOT NULL` predicate changes no answer and no plan while taking five index
insertions off each job on the worker's hot path (about 4.5 of 32 µs of database CPU
per job, measured with a claim/complete loop).

Revision ID: jobdesk_0002
Revises: jobdesk_0001
Create Date: 2026-12-01 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "jobdesk_0002"
down_revision: str | None = "jobdesk_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (index, table, columns, unique, predicate before, predicate after)
_BOTH = [
    (
        "ix_jobdesk_jobs_retried_from_id",
        "jobdesk_jobs",
        ["retried_from_id"],
        False,
        None,
        "retried_from_id IS NOT NULL",
    ),
    (
        "uq_jobdesk_jobs_running_group_key",
        "jobdesk_jobs",
        ["group_key"],
        True,
        "status = 'running'",
        "status = 'running' AND group_key IS NOT NULL",
    ),
    (
        "ix_jobdesk_job_attempts_error_fingerprint",
        "jobdesk_job_attempts",
        ["error_fingerprint"],
        False,
        None,
        "error_fingerprint IS NOT NULL",
    ),
]
# Trigram indexes exist on PostgreSQL only.
_POSTGRESQL = [
    ("ix_jobdesk_jobs_last_error_trgm", "jobdesk_jobs", "last_error"),
    ("ix_jobdesk_job_attempts_error_trgm", "jobdesk_job_attempts", "error"),
]


def _where(predicate: str | None) -> dict[str, sa.TextClause]:
    if predicate is None:
        return {}
    return {"postgresql_where": sa.text(predicate), "sqlite_where": sa.text(predicate)}


def _rebuild(after: bool) -> None:
    for name, table, columns, unique, before, now in _BOTH:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns, unique=unique, **_where(now if after else before))
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, table, column in _POSTGRESQL:
        op.drop_index(name, table_name=table)
        op.create_index(
            name,
            table,
            [column],
            postgresql_using="gin",
            postgresql_ops={column: "gin_trgm_ops"},
            **({"postgresql_where": sa.text(f"{column} IS NOT NULL")} if after else {}),
        )


def upgrade() -> None:
    _rebuild(after=True)


def downgrade() -> None:
    _rebuild(after=False)
