"""The redrives' tables: one row per redrive (`jobdesk_redrives`: what it retries, its
pace, its stop rule, its state and counters) and one per dead job it covers
(`jobdesk_redrive_items`: what became of that job and of its retry)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, utcnow
from jobdesk.shared.core.models import NAME_LENGTH, Base, BigId, in_list, table_of

#: The fastest pace a redrive takes, in jobs per minute. A step requeues at most a few
#: hundred jobs per second at this pace, each a resolution, a new row and an audit row:
#: faster than that is a bulk retry, not a paced one.
MAX_RATE_PER_MINUTE = 10_000
#: The largest window of the stop rule ("k of the first n", n at most this).
MAX_STOP_WINDOW = 1000
#: How long the description of a redrive's selection may be.
DESCRIPTION_LENGTH = 500


class RedriveState(StrEnum):
    """A redrive's states. Only `running` requeues; the three final ones never change."""

    RUNNING = "running"
    """Requeues at its pace; the leader's step moves it to `stopped` (the rule) or
    `finished` (nothing left), an operator to `paused` or `cancelled`."""
    PAUSED = "paused"
    """Requeues nothing; its new jobs' outcomes are still tallied. An operator resumes
    it (`running`) or cancels it."""
    CANCELLED = "cancelled"
    """An operator ended it; the dead jobs it had not reached stay dead, undecided."""
    STOPPED = "stopped"
    """The stop rule ended it: the new jobs were failing again (`stopped_reason`)."""
    FINISHED = "finished"
    """Every job was requeued (or skipped) and every new job had its first outcome."""


#: States a redrive is still at work in (its unreached jobs belong to it).
ACTIVE_STATES: tuple[RedriveState, ...] = (RedriveState.RUNNING, RedriveState.PAUSED)
FINAL_STATES: tuple[RedriveState, ...] = (
    RedriveState.CANCELLED,
    RedriveState.STOPPED,
    RedriveState.FINISHED,
)


class Skipped(StrEnum):
    """Why a redrive did not requeue one of its dead jobs."""

    RESOLVED = "resolved"
    """Someone decided on it meanwhile (retried, fixed or ignored it by hand), or it
    was deleted."""
    UNKNOWN_TYPE = "unknown_type"
    """No worker runs its type, so a retry would never run: it stays for a human."""


class Outcome(StrEnum):
    """How a new job's first decisive attempt went (`rules.verdict` says what counts)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Failing again: its first attempt failed, timed out, was lost or failed for good
    (or it went dead without one). This is what the stop rule counts."""
    CANCELLED = "cancelled"
    """Cancelled before any attempt decided anything: neither a success nor a failure."""
    GONE = "gone"
    """Deleted (retention) before its outcome was read: not counted either way."""


class Redrive(Base):
    """A paced retry of a frozen set of dead jobs.

    `selection` is the dead-letter filter it was started with (as query arguments, so
    the dashboard can link to it) and `description` says it in words. Its jobs are its
    items, taken in dead-job id order: `cursor_job_id` is the last one handled, so the
    next ones are those above it. `next_at` is the pace: the time the next requeue is
    due (`rules.allowance`). The counters are kept by the step in the same transaction
    as the items they count."""

    __tablename__ = "jobdesk_redrives"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    state: Mapped[str] = mapped_column(sa.String(16), server_default=RedriveState.RUNNING.value)
    selection: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    description: Mapped[str] = mapped_column(sa.String(DESCRIPTION_LENGTH))
    reason: Mapped[str] = mapped_column(sa.Text)
    rate_per_minute: Mapped[int] = mapped_column(sa.Integer)
    #: The stop rule: stop once `stop_failures` of `stop_window` new jobs failed again.
    stop_failures: Mapped[int] = mapped_column(sa.Integer)
    stop_window: Mapped[int] = mapped_column(sa.Integer)
    total: Mapped[int] = mapped_column(sa.Integer)
    requeued: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    skipped: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    succeeded: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    failed: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    #: New jobs cancelled or deleted before their first outcome.
    undecided: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    cursor_job_id: Mapped[int] = mapped_column(BigId, server_default=sa.text("0"))
    next_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    #: The latest change of state: who (an operator, or `jobdesk` for the step), when,
    #: and the reason given (a pause's or a cancel's).
    changed_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    changed_at: Mapped[datetime | None]
    change_reason: Mapped[str | None] = mapped_column(sa.Text)
    #: What the stop rule saw, in words ("5 of the first 20 new jobs failed again").
    stopped_reason: Mapped[str | None] = mapped_column(sa.Text)
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        sa.CheckConstraint(in_list("state", list(RedriveState)), name="state"),
        sa.CheckConstraint(
            f"rate_per_minute BETWEEN 1 AND {MAX_RATE_PER_MINUTE}", name="rate_per_minute"
        ),
        sa.CheckConstraint(
            f"stop_failures >= 1 AND stop_failures <= stop_window "
            f"AND stop_window <= {MAX_STOP_WINDOW}",
            name="stop_rule",
        ),
        sa.CheckConstraint(
            "total >= 0 AND requeued >= 0 AND skipped >= 0 AND requeued + skipped <= total "
            "AND succeeded >= 0 AND failed >= 0 AND undecided >= 0 "
            "AND succeeded + failed + undecided <= requeued",
            name="counts",
        ),
        # The leader's step looks for the redrives still at work, every second.
        sa.Index(
            "ix_jobdesk_redrives_active",
            "id",
            postgresql_where=sa.text(in_list("state", list(ACTIVE_STATES))),
            sqlite_where=sa.text(in_list("state", list(ACTIVE_STATES))),
        ),
    )


#: A requeued item whose new job has no outcome yet.
AWAITING_SQL = "new_job_id IS NOT NULL AND outcome IS NULL"
#: An item whose new job's outcome is known (the stop rule's window reads these).
JUDGED_SQL = "judged_at IS NOT NULL"


class RedriveItem(Base):
    """One dead job of a redrive, and its fate: still to go (all of `new_job_id`,
    `skipped` NULL and `job_id` above the redrive's cursor), skipped (why), or requeued
    as `new_job_id` — whose first outcome (`outcome`, `judged_at`) the step reads once
    it is known. No foreign key to the jobs: retention may delete them, the record of
    what the redrive did stays."""

    __tablename__ = "jobdesk_redrive_items"

    redrive_id: Mapped[int] = mapped_column(
        BigId, sa.ForeignKey("jobdesk_redrives.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(BigId, primary_key=True)
    new_job_id: Mapped[int | None] = mapped_column(BigId)
    requeued_at: Mapped[datetime | None]
    skipped: Mapped[str | None] = mapped_column(sa.String(16))
    outcome: Mapped[str | None] = mapped_column(sa.String(16))
    judged_at: Mapped[datetime | None]

    __table_args__ = (
        sa.CheckConstraint(
            f"skipped IS NULL OR {in_list('skipped', list(Skipped))}", name="skipped"
        ),
        sa.CheckConstraint(
            f"outcome IS NULL OR {in_list('outcome', list(Outcome))}", name="outcome"
        ),
        # A redrive's new jobs still waiting for their first outcome (read every step).
        sa.Index(
            "ix_jobdesk_redrive_items_awaiting",
            "redrive_id",
            "job_id",
            postgresql_where=sa.text(AWAITING_SQL),
            sqlite_where=sa.text(AWAITING_SQL),
        ),
        # The stop rule's window: a redrive's latest outcomes.
        sa.Index(
            "ix_jobdesk_redrive_items_judged",
            "redrive_id",
            "judged_at",
            postgresql_where=sa.text(JUDGED_SQL),
            sqlite_where=sa.text(JUDGED_SQL),
        ),
        # Which redrive holds a dead job (a new redrive leaves those out).
        sa.Index("ix_jobdesk_redrive_items_job_id", "job_id"),
    )


redrives = table_of(Redrive)
redrive_items = table_of(RedriveItem)
