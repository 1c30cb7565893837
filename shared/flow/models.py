"""The concurrency keys' table (`jobdesk_concurrency_keys`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import KEY_LENGTH, Base, table_of


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
