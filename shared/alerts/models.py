"""The alerts table: one open row per (rule, subject)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, in_list, table_of


class AlertStatus(StrEnum):
    """An alert is open while its rule still fires, resolved once it stops."""

    OPEN = "open"
    RESOLVED = "resolved"


class Alert(Base):
    """An alert raised by a maintenance check; one open row per (rule, subject)."""

    __tablename__ = "jobdesk_alerts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    rule: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    subject: Mapped[str] = mapped_column(sa.String(KEY_LENGTH))
    status: Mapped[str] = mapped_column(sa.String(16), server_default=AlertStatus.OPEN.value)
    opened_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    last_seen_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    resolved_at: Mapped[datetime | None]
    count: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("1"))
    message: Mapped[str] = mapped_column(sa.Text)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    notify_key: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH), unique=True)
    acknowledged_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    acknowledged_at: Mapped[datetime | None]
    acknowledged_note: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.CheckConstraint(in_list("status", sorted(AlertStatus)), name="status"),
        sa.Index(
            "uq_jobdesk_alerts_open_rule_subject",
            "rule",
            "subject",
            unique=True,
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        ),
        sa.Index("ix_jobdesk_alerts_opened_at", "opened_at"),
    )


alerts = table_of(Alert)
