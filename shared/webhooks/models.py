"""Webhook tables: named endpoints with their secrets, and the delivery log."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import KEY_LENGTH, NAME_LENGTH, Base, BigId, table_of


class WebhookEndpoint(Base):
    """A named webhook destination with its signing secret(s) and operator pause."""

    __tablename__ = "jobdesk_webhook_endpoints"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), unique=True)
    url: Mapped[str] = mapped_column(sa.Text)
    secret: Mapped[str] = mapped_column(sa.String(200))
    previous_secret: Mapped[str | None] = mapped_column(sa.String(200))
    previous_secret_expires_at: Mapped[datetime | None]
    paused: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    paused_until: Mapped[datetime | None]
    paused_reason: Mapped[str | None] = mapped_column(sa.Text)
    disabled_reason: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())


class WebhookDelivery(Base):
    """One HTTP request made for a webhook job: what was sent and what came back."""

    __tablename__ = "jobdesk_webhook_deliveries"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigId, sa.ForeignKey("jobdesk_jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(sa.Integer)
    endpoint: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    webhook_id: Mapped[str] = mapped_column(sa.String(KEY_LENGTH))
    url: Mapped[str] = mapped_column(sa.Text)
    at: Mapped[datetime] = mapped_column(server_default=utcnow())
    status_code: Mapped[int | None] = mapped_column(sa.Integer)
    latency_ms: Mapped[float | None] = mapped_column(sa.Float)
    outcome: Mapped[str] = mapped_column(sa.String(32))
    response_excerpt: Mapped[str | None] = mapped_column(sa.Text)
    error: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.Index("ix_jobdesk_webhook_deliveries_job_id", "job_id"),
        sa.Index("ix_jobdesk_webhook_deliveries_endpoint_at", "endpoint", "at"),
    )


webhook_endpoints = table_of(WebhookEndpoint)
webhook_deliveries = table_of(WebhookDelivery)
