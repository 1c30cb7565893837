"""Safety-valve tables: circuit breakers and rate-limit buckets shared by every worker."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.models import KEY_LENGTH, Base, in_list, table_of


class BreakerState(StrEnum):
    """Where a circuit breaker is (see `limits.breakers`)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker(Base):
    """Per-destination breaker state shared by every worker process."""

    __tablename__ = "jobdesk_circuit_breakers"

    key: Mapped[str] = mapped_column(sa.String(KEY_LENGTH), primary_key=True)
    state: Mapped[str] = mapped_column(sa.String(16), server_default=BreakerState.CLOSED.value)
    consecutive_failures: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    opened_at: Mapped[datetime | None]
    retry_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())

    __table_args__ = (sa.CheckConstraint(in_list("state", sorted(BreakerState)), name="state"),)


class RateLimitBucket(Base):
    """Token bucket per named limit (`smtp:default`, `webhook:crm`), shared via the DB."""

    __tablename__ = "jobdesk_rate_limits"

    key: Mapped[str] = mapped_column(sa.String(KEY_LENGTH), primary_key=True)
    tokens: Mapped[float] = mapped_column(sa.Float)
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())


circuit_breakers = table_of(CircuitBreaker)
rate_limits = table_of(RateLimitBucket)
