"""Schedules in the database: declare, read, fire, pause, resume, run now.

Times are computed by the worker (`worker.schedules`); this module only stores and
compares them, so the dashboard and the CLI read schedules without a scheduler library.

Exactly one job per slot, across leader hand-overs, restarts and hosts: a fired slot's
job carries the idempotency key `schedule:<name>:<slot>` (a second leader firing the same
slot gets the existing job back), and advancing `next_run_at` is a compare-and-set on
the value the leader read, so two leaders cannot both move a schedule forward. `<slot>`
is the UTC instant the slot runs at; in a zone with daylight saving time a fixed-time
cron's repeated wall-clock slot has one instant (its first occurrence), so one key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.enqueue import enqueue
from jobdesk.shared.core.errors import NotFoundError
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.validation import check_name, check_reason, serialize_payload
from jobdesk.shared.schedules.models import schedules

__all__ = [
    "Declared",
    "ScheduleRow",
    "advance",
    "due",
    "enqueue_slot",
    "get_schedule",
    "list_schedules",
    "pause",
    "recent_runs",
    "reschedule",
    "resume",
    "run_now",
    "slot_key",
    "sync_declared",
]

#: How many past runs the dashboard and the CLI show per schedule.
RECENT_RUNS = 10

_s = schedules.c


@dataclass(frozen=True, slots=True)
class Declared:
    """A schedule as code declares it, with its first slot computed by the worker."""

    name: str
    job_type: str
    payload: Mapping[str, Any]
    cron: str | None
    every_seconds: float | None
    timezone: str
    catch_up: bool
    description: str
    first_run_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    job_type: str
    payload: dict[str, Any]
    cron: str | None
    every_seconds: float | None
    timezone: str
    catch_up: bool
    description: str
    next_run_at: datetime
    last_slot_at: datetime | None
    last_job_id: int | None
    last_status: str | None
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    paused_reason: str | None


_DEFINITION = ("job_type", "payload", "cron", "every_seconds", "timezone", "catch_up")


def slot_key(name: str, slot: datetime) -> str:
    """The idempotency key of the job for one slot of a schedule."""
    return f"schedule:{name}:{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def sync_declared(conn: sa.Connection, declared: Sequence[Declared], *, now: datetime) -> int:
    """Store what code declares: new schedules are added, changed definitions replace
    the stored one (and restart from their next slot); pauses are kept. Returns how
    many rows changed."""
    changed = 0
    for item in declared:
        check_name("schedule", item.name)
        payload = serialize_payload(item.payload)
        row = conn.execute(sa.select(schedules).where(_s.name == item.name)).one_or_none()
        definition = {
            "job_type": item.job_type,
            "payload": payload,
            "cron": item.cron,
            "every_seconds": item.every_seconds,
            "timezone": item.timezone,
            "catch_up": item.catch_up,
            "description": item.description,
        }
        if row is None:
            conn.execute(
                sa.insert(schedules).values(
                    name=item.name,
                    next_run_at=item.first_run_at,
                    declared_at=now,
                    updated_at=now,
                    **definition,
                )
            )
            changed += 1
            continue
        stored = dict(row._mapping)
        wanted = {**definition, "payload": dict(item.payload)}
        if any(stored[key] != wanted[key] for key in _DEFINITION):
            conn.execute(
                sa.update(schedules)
                .where(_s.name == item.name)
                .values(next_run_at=item.first_run_at, updated_at=now, **definition)
            )
            changed += 1
        elif stored["description"] != item.description:
            conn.execute(
                sa.update(schedules)
                .where(_s.name == item.name)
                .values(description=item.description)
            )
    return changed


def _rows(conn: sa.Connection, condition: Any = None) -> list[ScheduleRow]:
    last = jobs.alias("last_job")
    query = (
        sa.select(schedules, last.c.status.label("last_status"))
        .select_from(schedules.outerjoin(last, last.c.id == _s.last_job_id))
        .order_by(_s.name)
    )
    if condition is not None:
        query = query.where(condition)
    return [
        ScheduleRow(
            row.name,
            row.job_type,
            row.payload or {},
            row.cron,
            row.every_seconds,
            row.timezone,
            bool(row.catch_up),
            row.description,
            row.next_run_at,
            row.last_slot_at,
            row.last_job_id,
            row.last_status,
            bool(row.paused),
            row.paused_by,
            row.paused_at,
            row.paused_reason,
        )
        for row in conn.execute(query)
    ]


def list_schedules(conn: sa.Connection) -> list[ScheduleRow]:
    return _rows(conn)


def get_schedule(conn: sa.Connection, name: str) -> ScheduleRow:
    found = _rows(conn, _s.name == name)
    if not found:
        raise NotFoundError(f"no schedule named {name!r}")
    return found[0]


def due(conn: sa.Connection, now: datetime) -> list[ScheduleRow]:
    """Schedules whose next slot has come, paused ones left out."""
    return _rows(conn, sa.and_(_s.next_run_at <= now, _s.paused.is_(sa.false())))


def enqueue_slot(conn: sa.Connection, row: ScheduleRow, slot: datetime) -> int:
    """The job of one slot (an existing one when another leader fired it already)."""
    return enqueue(conn, row.job_type, row.payload, idempotency_key=slot_key(row.name, slot))


def advance(
    conn: sa.Connection,
    name: str,
    *,
    expected_next: datetime,
    last_slot: datetime,
    job_id: int,
    next_run_at: datetime,
    now: datetime,
) -> bool:
    """Move the schedule past `last_slot` — only if nobody else did (compare-and-set)."""
    result = conn.execute(
        sa.update(schedules)
        .where(_s.name == name, _s.next_run_at == expected_next)
        .values(
            next_run_at=next_run_at,
            last_slot_at=last_slot,
            last_job_id=job_id,
            updated_at=now,
        )
    )
    return bool(result.rowcount)


def reschedule(
    conn: sa.Connection, name: str, *, expected_next: datetime, next_run_at: datetime, now: datetime
) -> bool:
    """Move `next_run_at` on without a job (the stored slot needs none) — only if nobody
    else moved it (compare-and-set)."""
    result = conn.execute(
        sa.update(schedules)
        .where(_s.name == name, _s.next_run_at == expected_next)
        .values(next_run_at=next_run_at, updated_at=now)
    )
    return bool(result.rowcount)


def recent_runs(conn: sa.Connection, name: str, limit: int = RECENT_RUNS) -> list[dict[str, Any]]:
    """The schedule's latest jobs (slots and manual runs), newest first."""
    prefix = f"schedule:{name}:"
    rows = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.status,
            jobs.c.created_at,
            jobs.c.finished_at,
            jobs.c.attempts,
            jobs.c.idempotency_key,
        )
        .where(jobs.c.idempotency_key.like(_like_prefix(prefix), escape="\\"))
        .order_by(jobs.c.id.desc())
        .limit(limit)
    )
    return [dict(row._mapping) for row in rows]


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def pause(
    conn: sa.Connection, name: str, *, actor: str, reason: str | None, now: datetime
) -> ScheduleRow:
    """Stop firing until resumed (missed slots are not caught up unless `catch_up`)."""
    clean = check_reason(reason, required=True)
    get_schedule(conn, name)
    conn.execute(
        sa.update(schedules)
        .where(_s.name == name)
        .values(paused=True, paused_by=actor, paused_at=now, paused_reason=clean, updated_at=now)
    )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.SCHEDULE_PAUSE,
        subject=f"schedule:{name}",
        reason=clean,
        now=now,
    )
    return get_schedule(conn, name)


def resume(
    conn: sa.Connection, name: str, *, actor: str, reason: str | None = None, now: datetime
) -> ScheduleRow:
    clean = check_reason(reason, required=False)
    get_schedule(conn, name)
    conn.execute(
        sa.update(schedules)
        .where(_s.name == name)
        .values(paused=False, paused_by=None, paused_at=None, paused_reason=None, updated_at=now)
    )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.SCHEDULE_RESUME,
        subject=f"schedule:{name}",
        reason=clean,
        now=now,
    )
    return get_schedule(conn, name)


def run_now(
    conn: sa.Connection, name: str, *, actor: str, reason: str | None = None, now: datetime
) -> int:
    """Enqueue one extra run now (its own key: it never takes a slot's place)."""
    clean = check_reason(reason, required=False)
    row = get_schedule(conn, name)
    key = f"schedule:{name}:manual:{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
    job_id = enqueue(conn, row.job_type, row.payload, idempotency_key=key)
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.SCHEDULE_RUN,
        job_id=job_id,
        subject=f"schedule:{name}",
        reason=clean,
        now=now,
    )
    return job_id
