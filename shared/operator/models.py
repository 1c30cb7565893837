"""The operator side's table: dashboard accounts (the audit trail is a core table)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, in_list, table_of
from jobdesk.shared.operator.zones import ZONE_MAX_CHARS

#: The unique index that makes usernames case-insensitive (migration jobdesk_0002).
USERNAME_LOWER_INDEX = "uq_jobdesk_operators_username_lower"


class Role(StrEnum):
    """Dashboard roles, in increasing power: each includes the ones before it."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class Operator(Base):
    """A dashboard user with a role: viewer (read), operator (triage), admin (everything)."""

    __tablename__ = "jobdesk_operators"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    role: Mapped[str] = mapped_column(sa.String(16))
    disabled: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    last_login_at: Mapped[datetime | None]
    #: Session generation: every session cookie carries the value it was issued under
    #: and is refused once this moves on (logout, disable, enable, password change).
    session_epoch: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    #: The IANA zone this operator reads times in; NULL: the browser's zone, else UTC.
    timezone: Mapped[str | None] = mapped_column(sa.String(ZONE_MAX_CHARS))

    __table_args__ = (
        sa.CheckConstraint(in_list("role", sorted(Role)), name="role"),
        sa.CheckConstraint("session_epoch >= 0", name="session_epoch"),
        # Usernames are case-insensitive: `Ana` is the account `ana`. The username
        # pattern is ASCII, so lower() means the same on both databases.
        sa.Index(USERNAME_LOWER_INDEX, sa.func.lower(sa.literal_column("username")), unique=True),
    )


operators = table_of(Operator)
