"""What changed on a list since a person loaded it: the small, bounded queries behind
the live pages' "3 new since you loaded — show" bars, the in-place status of the rows
already shown, and the progress of the jobs one action made.

A list remembers where it stood when it was rendered — the newest job or alert id, or
the time for dead letters (a job goes dead long after its id was taken) — and a poll
counts what matches the same filters beyond that mark. Counts stop at `NEW_CAP`, so a
poll reads at most that many index entries past the mark whatever the backlog; row
states are one primary-key lookup for the ids on the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import FINAL, JobStatus
from jobdesk.shared.operator.filters import MAX_PAGE_SIZE, JobFilters
from jobdesk.shared.operator.queries.jobs import filter_conditions

#: The most new rows a poll counts ("1,000+ new").
NEW_CAP = 1000


@dataclass(frozen=True, slots=True)
class NewCount:
    count: int
    capped: bool


def _capped_count(conn: sa.Connection, query: sa.Select[tuple[int]]) -> NewCount:
    limited = query.limit(NEW_CAP + 1).subquery()
    found = int(conn.execute(sa.select(sa.func.count()).select_from(limited)).scalar_one())
    return NewCount(min(found, NEW_CAP), found > NEW_CAP)


def newest_job_id(conn: sa.Connection) -> int:
    """The highest job id now (0 on an empty table): the mark a jobs list polls from."""
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(jobs.c.id), 0))).scalar_one())


def new_jobs(
    conn: sa.Connection, filters: JobFilters, newer_than: int, *, now: datetime
) -> NewCount:
    """Jobs matching `filters` created after job #`newer_than` (a primary-key range)."""
    query = sa.select(jobs.c.id).where(
        jobs.c.id > newer_than, *filter_conditions(conn, filters, now)
    )
    return _capped_count(conn, query)


def new_dead(
    conn: sa.Connection, filters: JobFilters, seen_at: datetime, *, now: datetime
) -> NewCount:
    """Dead jobs still needing a decision (and matching `filters`) that went dead after
    `seen_at` — served by the (status, finished_at) index."""
    conditions = filter_conditions(conn, filters.dead_unresolved(), now)
    query = sa.select(jobs.c.id).where(jobs.c.finished_at > seen_at, *conditions)
    return _capped_count(conn, query)


def newest_alert_id(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(alerts.c.id), 0))).scalar_one())


def new_alerts(conn: sa.Connection, status: str, newer_than: int) -> NewCount:
    """Alerts in `status` raised after alert #`newer_than`."""
    query = sa.select(alerts.c.id).where(alerts.c.id > newer_than, alerts.c.status == status)
    return _capped_count(conn, query)


@dataclass(frozen=True, slots=True)
class RowState:
    id: int
    status: str
    resolution: str | None


def row_states(conn: sa.Connection, ids: Sequence[int]) -> list[RowState]:
    """The current status of the jobs a list shows (one page at most)."""
    wanted = list(dict.fromkeys(ids))[:MAX_PAGE_SIZE]
    if not wanted:
        return []
    query = sa.select(jobs.c.id, jobs.c.status, jobs.c.resolution).where(jobs.c.id.in_(wanted))
    return [RowState(row.id, row.status, row.resolution) for row in conn.execute(query)]


@dataclass(frozen=True, slots=True)
class ActionProgress:
    """Where the jobs one action made stand now."""

    audit_id: int
    action: str | None
    actor: str | None
    at: datetime | None
    by_status: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def active(self) -> int:
        return sum(n for status, n in self.by_status.items() if status not in FINAL)


def action_progress(conn: sa.Connection, audit_id: int, *, now: datetime) -> ActionProgress:
    """Counts by status of the jobs made by the action of audit entry #`audit_id`
    (at most one bulk cap of jobs), in lifecycle order."""
    entry = conn.execute(
        sa.select(audit_log.c.action, audit_log.c.actor, audit_log.c.at).where(
            audit_log.c.id == audit_id
        )
    ).one_or_none()
    counts: dict[str, int] = {}
    if entry is not None:
        conditions = filter_conditions(conn, JobFilters(from_audit=audit_id), now)
        query = sa.select(jobs.c.status, sa.func.count()).where(*conditions).group_by(jobs.c.status)
        counts = {str(status): int(n) for status, n in conn.execute(query)}
    ordered = {str(s): counts[str(s)] for s in JobStatus if str(s) in counts}
    return ActionProgress(
        audit_id,
        entry.action if entry else None,
        entry.actor if entry else None,
        entry.at if entry else None,
        ordered,
    )


def first_entry_of_action(
    conn: sa.Connection, *, actor: str, action: str, at: datetime
) -> int | None:
    """The id of the first audit entry an action wrote (what `from_audit` links to)."""
    query = sa.select(sa.func.min(audit_log.c.id)).where(
        audit_log.c.actor == actor, audit_log.c.action == action, audit_log.c.at == at
    )
    value = conn.execute(query).scalar_one()
    return None if value is None else int(value)


__all__ = [
    "NEW_CAP",
    "ActionProgress",
    "NewCount",
    "RowState",
    "action_progress",
    "first_entry_of_action",
    "new_alerts",
    "new_dead",
    "new_jobs",
    "newest_alert_id",
    "newest_job_id",
    "row_states",
]
