"""The flow-control tables: concurrency keys (`jobdesk_concurrency_keys`) and
quarantine holds (`jobdesk_holds`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, table_of


class ConcurrencyKey(Base):
    """A key jobs were enqueued with (`concurrency_key=`): the limit its jobs declare
    (None: no limit, only a fair place in line) and when its slots last changed. The
    slot triggers lock this row while they count, so the key's slots change one
    statement at a time; retention deletes it once the key has no job left."""

    __tablename__ = "jobdesk_concurrency_keys"

    key: Mapped[str] = mapped_column(sa.String(KEY_LENGTH), primary_key=True)
    slot_limit: Mapped[int | None] = mapped_column(sa.Integer)
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())

    __table_args__ = (
        sa.CheckConstraint("slot_limit IS NULL OR slot_limit > 0", name="slot_limit"),
    )


concurrency_keys = table_of(ConcurrencyKey)


#: What a hold matches, each against one field of a waiting job.
HOLD_MATCHES = ("concurrency_key", "group_key", "payload")


class Hold(Base):
    """A quarantine: every job not yet running whose `match` field equals `value` (for
        `payload`, the payload's `path`, dotted, read as text) waits, new ones included, until
        the hold is released — by an operator or, when `until` passes, by the leader
    (`jobdesk.shared.flow.holds`). Kept
        after release as the record of who held what, why and for how long."""

    __tablename__ = "jobdesk_holds"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    match: Mapped[str] = mapped_column(sa.String(20))
    path: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    value: Mapped[str] = mapped_column(sa.String(KEY_LENGTH))
    #: A payload hold's JSON values (`account_id=42` holds the number 42 and the string
    #: "42", as the payload search reads a term).
    candidates: Mapped[list[Any] | None] = mapped_column(JSONDocument)
    reason: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    until: Mapped[datetime | None]
    released_at: Mapped[datetime | None]
    released_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))

    __table_args__ = (
        sa.CheckConstraint("match IN ('concurrency_key', 'group_key', 'payload')", name="match"),
        sa.CheckConstraint(
            "(match = 'payload') = (path IS NOT NULL AND candidates IS NOT NULL)", name="path"
        ),
        sa.Index(
            "ix_jobdesk_holds_active",
            "match",
            "value",
            postgresql_where=sa.text("released_at IS NULL"),
            sqlite_where=sa.text("released_at IS NULL"),
        ),
    )


holds = table_of(Hold)
