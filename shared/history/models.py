"""The history rollup's tables: one row per minute (and one per hour), queue and job
type, and the watermark that says which attempts are already in them."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, table_of


class _Figures:
    """The counters every bucket carries, minute or hour.

    Wait figures cover the attempts whose wait is still known (see
    `jobdesk.shared.history.rollup`): `waited` of them, `wait_seconds_sum` and
    `wait_seconds_max` over those, so a reader can draw the mean and the worst."""

    queue: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    job_type: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    #: Attempts that succeeded.
    processed: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    #: Attempts that failed (an error, a timeout, a lost worker, a permanent error).
    failed: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    #: Of those failed attempts, the ones that left their job dead.
    dead: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    waited: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    wait_seconds_sum: Mapped[float] = mapped_column(sa.Float, server_default=sa.text("0"))
    wait_seconds_max: Mapped[float | None] = mapped_column(sa.Float)


class HistoryMinute(_Figures, Base):
    """What finished in one minute (UTC, by `finished_at`) for one queue and job type."""

    __tablename__ = "jobdesk_history_minutes"

    minute: Mapped[datetime] = mapped_column(primary_key=True)


class HistoryHour(_Figures, Base):
    """The same figures per hour (the sum of the hour's minutes), so the 7-day charts read
    168 rows per queue and type instead of 10,080. Written with the minutes, pruned with
    them."""

    __tablename__ = "jobdesk_history_hours"

    hour: Mapped[datetime] = mapped_column(primary_key=True)


class HistoryWatermark(Base):
    """How far the rollup has read `jobdesk_job_attempts`: every attempt with an id up to
    `last_attempt_id` is counted, and the buckets are complete before `settled_before`."""

    __tablename__ = "jobdesk_history_watermark"

    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    last_attempt_id: Mapped[int] = mapped_column(BigId)
    settled_before: Mapped[datetime | None]
    rolled_at: Mapped[datetime | None]


history_minutes = table_of(HistoryMinute)
history_hours = table_of(HistoryHour)
history_watermark = table_of(HistoryWatermark)
