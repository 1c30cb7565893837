"""Quarantine holds: on-call holds back every job of one tenant — by concurrency key,
group key or payload term (`tenant:42`, `payload account_id=42`) — without pausing the
queue, until the hold is released.

A held job is `waiting` with `held_by` naming the hold. It uses no attempt while held (a
running job is not touched; if it fails, its retry is held). Holding covers what is
there when the hold is placed (`place_hold`, one statement) and what comes after: the
hold triggers (`jobdesk.shared.core.driver.hold_triggers`) park every new job, retry,
released dependent or slot taker that matches an active hold, in the transaction that
writes it. Releasing a hold (`release_hold`, by an operator or by the leader when its
`until` passes) puts its jobs back in line at their own time; a key's slots and any
other hold that matches park them again.

Placing and releasing are audited (`hold.add`, `hold.release`) in their own
transaction. A hold is kept after release, as the record of who held what and why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.audit import AuditAction, record
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.hold_triggers import (
    POSTGRESQL_DDL,
    POSTGRESQL_DROP,
    SQLITE_DDL,
    SQLITE_DROP,
)
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.masking import mask_text
from jobdesk.shared.core.models import KEY_LENGTH, install_after_create, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.core.validation import check_reason
from jobdesk.shared.flow.models import HOLD_MATCHES, holds

__all__ = [
    "HOLD_MATCHES",
    "HoldPreview",
    "HoldRecord",
    "HoldTarget",
    "ddl",
    "drop_ddl",
    "holds_by_id",
    "parse_hold_end",
    "place_hold",
    "preview_hold",
    "record_of",
    "release_expired",
    "release_hold",
]

#: A preview counts the jobs a hold would take up to this many ("10,000+" past it).
PREVIEW_COUNT_CAP = 10_000
#: The longest reason kept.
REASON_LENGTH = 500
#: Who releases a hold whose `until` passed.
EXPIRY_ACTOR = "jobdesk (end time reached)"

_j = jobs.c
_h = holds.c


def ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that install the hold triggers on this connection's database."""
    return driver(bind).choose(postgresql=POSTGRESQL_DDL, sqlite=SQLITE_DDL)


def drop_ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that remove them (the migration's downgrade)."""
    return driver(bind).choose(postgresql=POSTGRESQL_DROP, sqlite=SQLITE_DROP)


@dataclass(frozen=True, slots=True)
class HoldTarget:
    """What a hold matches: `match` is `concurrency_key`, `group_key` or `payload` (then
    `path` is the payload key, dotted, and `candidates` the JSON values it accepts)."""

    match: str
    value: str
    path: str | None = None
    candidates: tuple[Any, ...] = ()

    @classmethod
    def parse(cls, match: str, text: str) -> HoldTarget:
        """A target from a form or the command line: `("concurrency_key", "tenant:42")`,
        `("payload", "account_id=42")`. Raises ValidationError naming the problem."""
        from jobdesk.shared.operator.queries.payload_search import parse_terms

        if match not in HOLD_MATCHES:
            raise ValidationError(
                "match", f"{match[:40]!r} is not one of {', '.join(HOLD_MATCHES)}"
            )
        value = (text or "").strip()
        if not value:
            raise ValidationError("value", "says what to hold (e.g. tenant:42)")
        if len(value) > KEY_LENGTH:
            raise ValidationError("value", f"is limited to {KEY_LENGTH} characters")
        if any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise ValidationError("value", "must not contain control characters")
        if match != "payload":
            return cls(match, value)
        terms = parse_terms(value)
        if len(terms) != 1:
            raise ValidationError("value", "a payload hold is one term, e.g. account_id=42")
        (term,) = terms
        return cls(match, str(term), ".".join(term.path), term.candidates)

    def describe(self) -> str:
        """ "tenant:42", "group orders-7", "payload account_id=42" (for lines and lists)."""
        if self.match == "concurrency_key":
            return self.value
        if self.match == "group_key":
            return f"group {self.value}"
        return f"payload {self.value}"

    def condition(self, conn: sa.Connection) -> sa.ColumnElement[bool]:
        """The jobs this target matches, answered from an index on both databases."""
        if self.match == "concurrency_key":
            return _j.concurrency_key == self.value
        if self.match == "group_key":
            return _j.group_key == self.value
        assert self.path is not None
        return driver(conn).payload_match(tuple(self.path.split(".")), self.candidates)


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """A hold as stored; `held`: the jobs it holds, as counted by whoever built the record
    (placing it: the jobs it took; 0 when nobody counted)."""

    id: int
    target: HoldTarget
    reason: str
    created_by: str
    created_at: datetime
    until: datetime | None
    released_at: datetime | None
    released_by: str | None
    held: int

    @property
    def active(self) -> bool:
        return self.released_at is None

    def sentence(self) -> str:
        """ "quarantine of tenant:42 by ana — runaway import" (the job's held line)."""
        return f"quarantine of {self.target.describe()} by {self.created_by} — {self.reason}"


@dataclass(frozen=True, slots=True)
class HoldPreview:
    """What a hold would take now: how many jobs (`capped`: at least that many) and the
    first few ids, oldest first."""

    target: HoldTarget
    count: int
    capped: bool
    sample: tuple[int, ...]

    def count_text(self) -> str:
        return f"{self.count:,}+" if self.capped else f"{self.count:,}"


def _could_run() -> sa.ColumnElement[bool]:
    return sa.or_(
        _j.status.in_([JobStatus.QUEUED.value, JobStatus.FAILED.value]),
        sa.and_(_j.status == JobStatus.WAITING.value, _j.waiting_for == 0),
    )


def preview_hold(conn: sa.Connection, target: HoldTarget, *, sample: int = 20) -> HoldPreview:
    """The jobs `target` would hold if placed now (a bounded count and a sample)."""
    matching = sa.and_(target.condition(conn), _j.held_by.is_(None), _could_run())
    count = conn.execute(
        sa.select(sa.func.count()).select_from(
            sa.select(_j.id).where(matching).limit(PREVIEW_COUNT_CAP + 1).subquery()
        )
    ).scalar_one()
    ids = conn.execute(sa.select(_j.id).where(matching).order_by(_j.id).limit(sample)).scalars()
    return HoldPreview(target, min(count, PREVIEW_COUNT_CAP), count > PREVIEW_COUNT_CAP, tuple(ids))


_SPAN = re.compile(r"(\d{1,5})\s*(m|min|h|d)", re.IGNORECASE)
_SPAN_SECONDS = {"m": 60, "min": 60, "h": 3600, "d": 86400}
#: The longest a hold may be set to last (an open-ended hold has no end time at all).
LONGEST_HOLD = timedelta(days=90)


def parse_hold_end(
    *, for_text: str | None = None, until_text: str | None = None, now: datetime
) -> datetime | None:
    """A hold's end time from "for 2h" (`30m`, `2h`, `3d`) or "until" an ISO 8601 time
    (UTC when it names no offset); None for neither. Raises ValidationError."""
    if for_text and until_text:
        raise ValidationError("until", "give an end time or a duration, not both")
    if for_text:
        found = _SPAN.fullmatch(for_text.strip())
        if found is None:
            raise ValidationError("for", f"{for_text[:40]!r} is not a duration like 30m, 2h or 3d")
        span = timedelta(seconds=int(found[1]) * _SPAN_SECONDS[found[2].lower()])
        end = now + span
    elif until_text:
        try:
            end = datetime.fromisoformat(until_text.strip())
        except ValueError:
            raise ValidationError(
                "until", f"{until_text[:40]!r} is not a time like 2026-12-05T09:00Z"
            ) from None
        if end.tzinfo is None:
            end = end.replace(tzinfo=UTC)
    else:
        return None
    if end <= now:
        raise ValidationError("until", "is already past; an end time is in the future")
    if end - now > LONGEST_HOLD:
        raise ValidationError("until", "is more than 90 days away; leave it open instead")
    return end


def _checked_reason(reason: str | None) -> str:
    text = (reason or "").strip()
    if not text:
        raise ValidationError("reason", "says why (the held jobs show it)")
    if len(text) > REASON_LENGTH:
        raise ValidationError("reason", f"is limited to {REASON_LENGTH} characters")
    if any(ord(char) < 32 and char not in "\n\t" for char in text):
        raise ValidationError("reason", "must not contain control characters")
    return mask_text(text)


def place_hold(
    conn: sa.Connection,
    target: HoldTarget,
    *,
    reason: str | None,
    actor: str,
    now: datetime,
    until: datetime | None = None,
) -> HoldRecord:
    """Hold every job `target` matches that could run, and every such job written
    later, until released (in the caller's transaction, audited)."""
    text = _checked_reason(reason)
    if until is not None and until <= now:
        raise ValidationError("until", "is already past; an end time is in the future")
    hold_id = conn.execute(
        sa.insert(holds)
        .values(
            match=target.match,
            path=target.path,
            value=target.value,
            candidates=list(target.candidates) if target.match == "payload" else None,
            reason=text,
            created_by=actor,
            created_at=now,
            until=until,
        )
        .returning(_h.id)
    ).scalar_one()
    held = driver(conn).hold_jobs(conn, hold_id, target.condition(conn), now=now)
    record(
        conn,
        actor=actor,
        action=AuditAction.HOLD_ADD,
        now=now,
        subject=target.describe()[:KEY_LENGTH],
        reason=text,
        details={
            "hold": hold_id,
            "held": held,
            "until": until.isoformat() if until is not None else None,
        },
    )
    return HoldRecord(hold_id, target, text, actor, now, until, None, None, held)


def release_hold(
    conn: sa.Connection, hold_id: int, *, actor: str, now: datetime, reason: str | None = None
) -> int:
    """Release an active hold: its jobs go back in line (audited); how many. Raises
    ValidationError when there is no such active hold."""
    row = conn.execute(
        sa.update(holds)
        .where(_h.id == hold_id, _h.released_at.is_(None))
        .values(released_at=now, released_by=actor)
        .returning(_h.match, _h.value, _h.path)
    ).one_or_none()
    if row is None:
        raise ValidationError("hold", f"#{hold_id} is not an active hold")
    released = driver(conn).release_held(conn, hold_id, now=now)
    record(
        conn,
        actor=actor,
        action=AuditAction.HOLD_RELEASE,
        now=now,
        subject=HoldTarget(row.match, row.value, row.path).describe()[:KEY_LENGTH],
        reason=check_reason(reason, required=False),
        details={"hold": hold_id, "released": released},
    )
    return released


def release_expired(conn: sa.Connection, now: datetime) -> int:
    """Release the holds whose end time passed (the leader's task); how many holds."""
    due = conn.execute(
        sa.select(_h.id)
        .where(_h.released_at.is_(None), _h.until.is_not(None), _h.until <= now)
        .order_by(_h.id)
    ).scalars()
    count = 0
    for hold_id in list(due):
        release_hold(conn, hold_id, actor=EXPIRY_ACTOR, now=now, reason="its end time passed")
        count += 1
    return count


def record_of(row: Any, *, held: int = 0) -> HoldRecord:
    """A stored hold (a `jobdesk_holds` row) as a record; `held` as counted by the caller."""
    return HoldRecord(
        id=row.id,
        target=HoldTarget(row.match, row.value, row.path, tuple(row.candidates or ())),
        reason=row.reason,
        created_by=row.created_by,
        created_at=row.created_at,
        until=row.until,
        released_at=row.released_at,
        released_by=row.released_by,
        held=held,
    )


def holds_by_id(conn: sa.Connection, ids: Iterable[int]) -> dict[int, HoldRecord]:
    """The holds with these ids (for the jobs they hold; their jobs are not counted:
    `jobdesk.shared.operator.queries.holds.quarantines` counts, bounded)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = conn.execute(sa.select(holds).where(_h.id.in_(wanted)))
    return {row.id: record_of(row) for row in rows}


install_after_create(frozenset({"jobdesk_jobs", "jobdesk_holds"}), ddl)
