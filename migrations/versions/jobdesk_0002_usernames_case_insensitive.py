"""Usernames are case-insensitive: a unique index on lower(username).

Revision ID: jobdesk_0002
Revises: jobdesk_0001
Create Date: 2026-12-10 09:00:00

Accounts that already differ only by case (`Ana` and `ana`) stop the upgrade with a
message naming them: which one to keep is a person's decision (rename or delete the
other with `jobdesk users …` or SQL, then migrate again).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from jobdesk.shared.migrate import MigrationError

revision: str = "jobdesk_0002"
down_revision: str | None = "jobdesk_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "uq_jobdesk_operators_username_lower"


def upgrade() -> None:
    operators = sa.table("jobdesk_operators", sa.column("username", sa.String))
    lowered = sa.func.lower(operators.c.username)
    clashing = sa.select(lowered).group_by(lowered).having(sa.func.count() > 1)
    found = op.get_bind().execute(sa.select(operators.c.username).where(lowered.in_(clashing)))
    names = sorted(found.scalars(), key=lambda name: (name.lower(), name))
    if names:
        raise MigrationError(
            "usernames are case-insensitive from this version, but these accounts differ "
            f"only by case: {', '.join(names)}; keep one of each (delete the others' rows "
            "from jobdesk_operators, or rename them — disabling is not enough, the name "
            "must go), then migrate again"
        )
    op.create_index(INDEX, "jobdesk_operators", [sa.text("lower(username)")], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="jobdesk_operators")
