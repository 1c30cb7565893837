"""What a redrive takes on: the unresolved dead jobs matching a dead-letter filter (an
error group, a type, a queue, an error text…), in id order, up to `REDRIVE_CAP`, less
those another running or paused redrive still has to reach — and the same in words and
in numbers before anything starts (`preview_redrive`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.masking import mask_text
from jobdesk.shared.core.models import jobs
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.jobs import ERROR_EXCERPT_CHARS, filter_conditions
from jobdesk.shared.operator.queries.payload_search import format_terms
from jobdesk.shared.redrives.models import (
    ACTIVE_STATES,
    DESCRIPTION_LENGTH,
    redrive_items,
    redrives,
)

__all__ = [
    "REDRIVE_CAP",
    "Preview",
    "candidates",
    "check_selection",
    "describe",
    "describe_selection",
    "preview_redrive",
]

#: The most dead jobs one redrive takes on. Its set is written when it starts, in one
#: INSERT … SELECT of the starting transaction (about a second for this many); at 60 a
#: minute they take more than a day. A larger backlog takes a second redrive, which
#: leaves out the jobs this one holds.
REDRIVE_CAP = 100_000
#: Query arguments that choose no jobs (they shape a list, not a selection).
_PRESENTATION = {"sort", "page_size", "status", "resolution", "time"}
#: How much of an error group's sample error its description quotes.
_SAMPLE_CHARS = 160


def check_selection(filters: JobFilters) -> None:
    """Refuse a selection that chooses nothing: every dead job is redriven by choosing
    them (a type, a queue…), never by default."""
    if not any(name not in _PRESENTATION for name in filters.to_args()):
        raise ValidationError(
            "selection",
            "choose what to redrive: an error group, a job type, a queue or an error text",
        )


def describe(filters: JobFilters, sample_error: str | None = None) -> str:
    """The selection in words: "error group 1a2b… (“timeout talking to crm”), type
    webhook.deliver, went dead in the last 24h"."""
    parts: list[str] = []
    if filters.fingerprint is not None:
        first = (sample_error or "").strip().split("\n", 1)[0][:_SAMPLE_CHARS]
        parts.append(f"error group {filters.fingerprint}" + (f" (“{first}”)" if first else ""))
    named = (
        ("type", filters.job_type),
        ("queue", filters.queue),
        ("endpoint", filters.endpoint),
        ("batch", f"#{filters.batch}" if filters.batch else None),
    )
    parts += [f"{label} {value}" for label, value in named if value]
    if filters.error is not None:
        parts.append(f"error contains “{filters.error}”")
    if filters.payload:
        parts.append(f"payload {format_terms(filters.payload)}")
    if filters.range is not None:
        parts.append(f"went dead in the last {filters.range}")
    if filters.since is not None or filters.until is not None:
        parts.append("within a chosen time window")
    text = ", ".join(parts) or "every dead job"
    return text if len(text) <= DESCRIPTION_LENGTH else text[: DESCRIPTION_LENGTH - 1] + "…"


def describe_selection(conn: sa.Connection, filters: JobFilters) -> str:
    """`describe`, quoting an error group's newest error as the dead-letter page does."""
    sample = None
    if filters.fingerprint is not None:
        sample = conn.execute(
            sa.select(sa.func.substr(jobs.c.last_error, 1, ERROR_EXCERPT_CHARS))
            .where(jobs.c.error_fingerprint == filters.fingerprint)
            .order_by(jobs.c.id.desc())
            .limit(1)
        ).scalar_one_or_none()
    # Errors are masked when stored; masked again here, as every page masks what it shows.
    return describe(filters, mask_text(sample) if sample else None)


def _held_by_active_redrive() -> sa.ColumnElement[bool]:
    """A dead job another redrive still has to reach (its items above its cursor)."""
    other = redrive_items.alias("other")
    return sa.exists(
        sa.select(1)
        .select_from(other.join(redrives, redrives.c.id == other.c.redrive_id))
        .where(
            other.c.job_id == jobs.c.id,
            redrives.c.state.in_([state.value for state in ACTIVE_STATES]),
            other.c.job_id > redrives.c.cursor_job_id,
        )
    )


def candidates(
    conn: sa.Connection, filters: JobFilters, now: datetime, *lead: Any
) -> sa.Select[Any]:
    """The jobs a redrive of `filters` takes on, in id order (`lead`: columns selected
    before the job id, e.g. the new redrive's id for an INSERT … SELECT)."""
    conditions = filter_conditions(conn, filters.dead_unresolved(), now)
    return (
        sa.select(*lead, jobs.c.id)
        .where(*conditions, ~_held_by_active_redrive())
        .order_by(jobs.c.id)
        .limit(REDRIVE_CAP)
    )


@dataclass(frozen=True, slots=True)
class Preview:
    """What starting a redrive of a selection would take on."""

    description: str
    #: Unresolved dead jobs matching (counted up to one past the cap).
    matching: int
    #: Of those, the ones another running or paused redrive still holds.
    held: int
    #: What this redrive would take on (at most `REDRIVE_CAP`).
    jobs: int
    cap: int = REDRIVE_CAP

    @property
    def capped(self) -> bool:
        return self.matching - self.held > self.cap


def preview_redrive(conn: sa.Connection, filters: JobFilters, *, now: datetime) -> Preview:
    """The jobs a redrive of `filters` would take on, counted (nothing is written)."""
    check_selection(filters)
    conditions = filter_conditions(conn, filters.dead_unresolved(), now)
    bound = REDRIVE_CAP + 1
    matching = sa.select(jobs.c.id).where(*conditions).limit(bound).subquery()
    free = (
        sa.select(jobs.c.id).where(*conditions, ~_held_by_active_redrive()).limit(bound).subquery()
    )
    counted = conn.execute(
        sa.select(
            sa.select(sa.func.count()).select_from(matching).scalar_subquery(),
            sa.select(sa.func.count()).select_from(free).scalar_subquery(),
        )
    ).one()
    total, available = int(counted[0]), int(counted[1])
    return Preview(
        description=describe_selection(conn, filters),
        matching=total,
        held=total - available,
        jobs=min(available, REDRIVE_CAP),
    )
