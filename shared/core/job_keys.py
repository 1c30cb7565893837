"""Keys that deduplicate for a while: `unique_for=S` and `debounce=S` on `enqueue`.

A plain `idempotency_key` deduplicates for as long as its job exists (the unique index
on `jobdesk_jobs`). These two are different promises, so they live in a table of their
own, `jobdesk_job_keys` (key → the job that holds it), and the job itself carries no
idempotency key — a job enqueued after a window closed is a new event, not a repeat of
the old one (its webhook-id, its email Message-ID are its own):

- `unique_for=S`: the first enqueue of the key makes a job and holds the key for S
  seconds (`expires_at`); an enqueue within them returns that job's id; after them it
  makes a new job and takes the key over.
- `debounce=S`: the first enqueue makes a job due S seconds later. While that job is
  still `queued`, each enqueue of the key replaces its payload and moves it to S seconds
  after the latest call; one job runs, with the latest payload. Once it has started (or
  ended, or was cancelled), the next enqueue makes a new job and takes the key over.

Race-safe under concurrent enqueues of one key: the key row is taken with `INSERT … ON
CONFLICT (key) DO UPDATE … WHERE <expired>` (PostgreSQL: a concurrent enqueue waits on
the row and then sees the holder that committed; SQLite: one writer at a time), and a
debounce takes the row's lock before it changes the held job. Times are the database's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import KEY_LENGTH, Base, BigId, table_of

#: The longest window a key may be held for (`unique_for`, `debounce`).
MAX_WINDOW = timedelta(days=30)


class JobKey(Base):
    """A key held by one job: until `expires_at` (unique_for), or while the job is still
    queued (debounce, `expires_at` None)."""

    __tablename__ = "jobdesk_job_keys"

    key: Mapped[str] = mapped_column(sa.String(KEY_LENGTH), primary_key=True)
    #: None only inside the enqueuing transaction, between taking the key and inserting
    #: the job. The key goes with its job (retention).
    job_id: Mapped[int | None] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_jobs.id", ondelete="CASCADE")
    )
    expires_at: Mapped[datetime | None]

    __table_args__ = (sa.Index("ix_jobdesk_job_keys_job_id", "job_id"),)


job_keys = table_of(JobKey)


class Window(NamedTuple):
    """How an enqueue's key deduplicates: `unique_for` or `debounce`, in seconds."""

    kind: str
    seconds: float


def check_window(
    idempotency_key: str | None, unique_for: object, debounce: object, *, has_run_at: bool
) -> Window | None:
    """The window asked for, or None; `ValidationError` naming the option otherwise."""
    if unique_for is None and debounce is None:
        return None
    if unique_for is not None and debounce is not None:
        raise ValidationError("debounce", "unique_for and debounce cannot be combined")
    kind, value = ("unique_for", unique_for) if unique_for is not None else ("debounce", debounce)
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValidationError(kind, f"must be a positive number of seconds, got {value!r}")
    if value > MAX_WINDOW.total_seconds():
        raise ValidationError(kind, f"at most {MAX_WINDOW.days} days")
    if idempotency_key is None:
        raise ValidationError(kind, "needs an idempotency_key (the key it deduplicates by)")
    if kind == "debounce" and has_run_at:
        raise ValidationError("debounce", "sets the start itself: leave run_at out")
    return Window(kind, float(value))


class Taken(NamedTuple):
    """What taking the key found: `mine` (make the job now) or the job holding it."""

    mine: bool
    holder: int | None


def take(conn: sa.Connection, key: str, window: Window, now: datetime) -> Taken:
    """Take `key` for a new job if it is free (or its unique window has closed);
    otherwise name the job holding it (its row locked until the caller commits)."""
    expires = now + timedelta(seconds=window.seconds) if window.kind == "unique_for" else None
    insert = driver(conn).insert(job_keys).values(key=key, job_id=None, expires_at=expires)
    claimed = conn.execute(
        insert.on_conflict_do_update(
            index_elements=[job_keys.c.key],
            set_={"job_id": None, "expires_at": expires},
            where=sa.and_(
                job_keys.c.expires_at.is_not(None),
                job_keys.c.expires_at <= sa.literal(now, UTCDateTime()),
            ),
        ).returning(job_keys.c.key)
    ).first()
    if claimed is not None:
        return Taken(True, None)
    holder = conn.execute(
        driver(conn).for_update(sa.select(job_keys.c.job_id).where(job_keys.c.key == key))
    ).scalar()
    return Taken(False, None if holder is None else int(holder))


def take_over(conn: sa.Connection, key: str) -> None:
    """The key's job has started or ended: the next job takes the key (debounce)."""
    conn.execute(sa.update(job_keys).where(job_keys.c.key == key).values(job_id=None))


def hold(conn: sa.Connection, key: str, job_id: int) -> None:
    """The key now names the job just made for it."""
    conn.execute(sa.update(job_keys).where(job_keys.c.key == key).values(job_id=job_id))
