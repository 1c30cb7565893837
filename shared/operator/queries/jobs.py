"""Read side for people: the jobs list (filters, error search, keyset pages) and one
job's full story (attempts, deliveries, lineage, group lane, audit).

List queries never select `payload`: a list of 100 jobs must not drag 100 payloads of
up to 256 KiB through the database and the web process (its few-pair summary is cut
in SQL, `operator.payload_summary`). Error excerpts are cut in SQL.
Every filter is bound as a parameter; sort orders and page sizes come from the
allow-lists in `operator.filters`. `statement_deadline` bounds how long a page may query.
"""

from __future__ import annotations

import base64
import binascii
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.documents import decode_document
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import ACTIVE, CLAIMABLE, JobStatus, sql_values
from jobdesk.shared.operator.filters import MAX_ID, UNRESOLVED, JobFilters, check_time_range
from jobdesk.shared.operator.queries.attempts import AttemptLine, attempt_lines
from jobdesk.shared.operator.queries.audit import AuditRow, entries_for_job
from jobdesk.shared.operator.queries.holds import endpoint_name, held_condition, quarantined_by
from jobdesk.shared.operator.queries.payload_search import payload_matches
from jobdesk.shared.operator.queries.payload_summary import payload_summary
from jobdesk.shared.operator.queries.visible_text import searchable_error_sql
from jobdesk.shared.redrives.models import redrive_items
from jobdesk.shared.reports.models import report_runs
from jobdesk.shared.retention.pruning import tombstone
from jobdesk.shared.webhooks.endpoints import WEBHOOK_JOB_TYPE
from jobdesk.shared.webhooks.models import webhook_deliveries

ERROR_EXCERPT_CHARS = 300
LIKE_ESCAPE = "\\"


def statement_deadline(conn: sa.Connection, seconds: float) -> AbstractContextManager[None]:
    """Bound every statement run inside the block (the caller's open transaction):
    PostgreSQL's `statement_timeout`, a progress handler's interrupt on SQLite."""
    return driver(conn).statement_deadline(conn, seconds)


def inline(value: str) -> sa.BindParameter[str]:
    """A bound value rendered into the SQL text at execution (never user free text:
    allow-listed states only), so plans for prepared statements still see the constant."""
    return sa.literal(value, sa.String(), literal_execute=True)


def like_pattern(text: str) -> str:
    """`%text%` with LIKE's wildcards in the text escaped (searching `50%_off` finds it)."""
    escaped = (text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2).replace("%", LIKE_ESCAPE + "%")).replace(
        "_", LIKE_ESCAPE + "_"
    )
    return f"%{escaped}%"


def error_matches(
    conn: sa.Connection, text: str, *, mask_emails: bool = False
) -> sa.ColumnElement[bool]:
    """Jobs whose current error or any past attempt's error contains `text`, ignoring case.

    PostgreSQL: `ILIKE` served by the pg_trgm GIN indexes on both columns; the two index
    searches are combined with UNION so each can use its own index. SQLite: `LIKE`
    (case-insensitive for ASCII). With `mask_emails` (a viewer) the text must also be in
    the part of the error a viewer sees — no stack, emails masked
    (`operator.visible_text`): the index finds the candidates, that check keeps them.
    """
    pattern = like_pattern(text)
    searched = jobs.alias("searched")

    def contains(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        return driver(conn).contains_like(column, pattern, LIKE_ESCAPE)

    current = contains(searched.c.last_error)
    past = contains(job_attempts.c.error)
    if mask_emails:
        current = sa.and_(current, contains(searchable_error_sql(conn, searched.c.last_error)))
        past = sa.and_(past, contains(searchable_error_sql(conn, job_attempts.c.error)))
    matching_ids = sa.union(
        sa.select(searched.c.id).where(current),
        sa.select(job_attempts.c.job_id).where(past),
    )
    return jobs.c.id.in_(matching_ids)


def filter_conditions(
    conn: sa.Connection, filters: JobFilters, now: datetime
) -> list[sa.ColumnElement[bool]]:
    """The WHERE clauses for `filters` (shared by the list, triage and bulk previews)."""
    conditions: list[sa.ColumnElement[bool]] = []
    status = filters.status
    if filters.resolution is not None and status is None:
        status = str(JobStatus.DEAD)
    if status is not None:
        # Statuses come from an allow-list; rendered inline so the planner can match the
        # partial indexes (`status = 'dead'`, the claimable statuses) in every plan.
        conditions.append(jobs.c.status == inline(status))
    if filters.queue is not None:
        conditions.append(jobs.c.queue == filters.queue)
    if filters.job_type is not None:
        conditions.append(jobs.c.job_type == filters.job_type)
    if filters.group_key is not None:
        conditions.append(jobs.c.group_key == filters.group_key)
    if filters.idempotency_key is not None:
        conditions.append(jobs.c.idempotency_key == filters.idempotency_key)
    if filters.fingerprint is not None:
        conditions.append(jobs.c.error_fingerprint == filters.fingerprint)
    if filters.resolution == UNRESOLVED:
        conditions.append(jobs.c.resolution.is_(None))
    elif filters.resolution is not None:
        conditions.append(jobs.c.resolution == inline(filters.resolution))
    if filters.retried_from is not None:
        conditions.append(jobs.c.retried_from_id == filters.retried_from)
    for column, job_id in (
        (jobs.c.group_key, filters.group_of),
        (jobs.c.idempotency_key, filters.key_of),
    ):
        if job_id is not None:
            # NULL when the job has no such key (or does not exist): matches nothing.
            reference = jobs.alias("reference")
            same = sa.select(reference.c[column.name]).where(reference.c.id == job_id)
            conditions.append(column == same.scalar_subquery())
    if filters.from_audit is not None:
        conditions.append(jobs.c.id.in_(jobs_made_by_action(filters.from_audit)))
    if filters.batch is not None:
        conditions.append(jobs.c.batch_id == filters.batch)
    since, until = filters.window(now)
    column = {
        "created": jobs.c.created_at,
        "finished": jobs.c.finished_at,
        "updated": jobs.c.updated_at,
    }[filters.time_field]
    if since is not None:
        conditions.append(column >= since)
    if until is not None:
        conditions.append(column <= until)
    if filters.error is not None:
        conditions.append(error_matches(conn, filters.error, mask_emails=filters.mask_emails))
    if filters.endpoint is not None:
        conditions.append(jobs.c.job_type == WEBHOOK_JOB_TYPE)
        conditions.append(endpoint_name(conn) == filters.endpoint)
    if filters.held is not None:
        conditions.append(held_condition(conn, filters.held, now=now))
    if filters.held_by is not None:
        conditions.append(quarantined_by(filters.held_by))
    if filters.redrive is not None:
        conditions.append(jobs.c.id.in_(jobs_requeued_by(filters.redrive)))
    conditions.extend(payload_matches(conn, term) for term in filters.payload)
    return conditions


def jobs_requeued_by(redrive_id: int) -> sa.Select[tuple[int | None]]:
    """The new jobs redrive `redrive_id` has requeued so far (its items are keyed by the
    redrive: a range of the primary key, at most 100,000 rows)."""
    items = redrive_items.c
    return sa.select(items.new_job_id).where(
        items.redrive_id == redrive_id, items.new_job_id.is_not(None)
    )


def jobs_made_by_action(audit_id: int) -> sa.Select[tuple[int | None]]:
    """The new jobs of the action that wrote audit entry `audit_id`.

    One action writes all its audit rows in one transaction with one timestamp and actor
    (`core.audit.record_many`), so the rows sharing entry #N's actor, action and time are
    that action's — found through the (actor, at) index, at most one bulk cap of rows.
    """
    anchor = audit_log.alias("anchor")
    entries = audit_log.alias("entries")
    same_action = sa.and_(
        anchor.c.id == audit_id,
        entries.c.actor == anchor.c.actor,
        entries.c.at == anchor.c.at,
        entries.c.action == anchor.c.action,
    )
    return (
        sa.select(entries.c.new_job_id)
        .select_from(entries.join(anchor, same_action))
        .where(entries.c.new_job_id.is_not(None))
    )


# --- the jobs list -----------------------------------------------------------------------

#: sort name -> (column, descending, column holds a timestamp)
_SORT_COLUMNS: dict[str, tuple[sa.Column[Any], bool, bool]] = {
    "newest": (jobs.c.id, True, False),
    "oldest": (jobs.c.id, False, False),
    "next_run": (jobs.c.next_run_at, False, True),
    "updated": (jobs.c.updated_at, True, True),
}


@dataclass(frozen=True, slots=True)
class JobSummary:
    """One line of a jobs list: everything but the payload."""

    id: int
    job_type: str
    queue: str
    status: str
    priority: int
    attempts: int
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    next_run_at: datetime
    finished_at: datetime | None
    group_key: str | None
    idempotency_key: str | None
    error_excerpt: str | None
    error_fingerprint: str | None
    resolution: str | None
    retried_from_id: int | None
    #: A few scalar payload members as JSON text (`operator.payload_summary`).
    payload_summary: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    items: list[JobSummary]
    next_cursor: str | None
    #: Where the page before this one ends (None on the first page).
    previous_cursor: str | None = None


_SUMMARY_COLUMNS = (
    jobs.c.id,
    jobs.c.job_type,
    jobs.c.queue,
    jobs.c.status,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.created_at,
    jobs.c.updated_at,
    jobs.c.next_run_at,
    jobs.c.finished_at,
    jobs.c.group_key,
    jobs.c.idempotency_key,
    sa.func.substr(jobs.c.last_error, 1, ERROR_EXCERPT_CHARS).label("error_excerpt"),
    jobs.c.error_fingerprint,
    jobs.c.resolution,
    jobs.c.retried_from_id,
    payload_summary(jobs.c.payload).label("payload_summary"),
)


def encode_cursor(sort: str, value: Any, job_id: int) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = json.dumps([sort, value, job_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(sort: str, raw: str) -> tuple[Any, int]:
    """The (sort value, id) a page starts after; refuses cursors from another sort."""
    problem = ValidationError("after", "is not a valid page cursor (start from the first page)")
    if len(raw) > 200:
        raise problem
    try:
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise problem from None
    if not (isinstance(data, list) and len(data) == 3 and data[0] == sort):
        raise problem
    _, value, job_id = data
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= MAX_ID:
        raise problem
    _, _, is_time = _SORT_COLUMNS[sort]
    if is_time:
        if not isinstance(value, str):
            raise problem
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise problem from None
        if value.tzinfo is None:
            raise problem
        value = check_time_range("after", value)
    elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise problem
    return value, job_id


def _cursor_of(filters: JobFilters, job: JobSummary) -> str:
    column, _, _ = _SORT_COLUMNS[filters.sort]
    value = job.id if column is jobs.c.id else getattr(job, column.name)
    return encode_cursor(filters.sort, value, job.id)


def _beyond(filters: JobFilters, cursor: str, *, forward: bool) -> sa.ColumnElement[bool]:
    """The rows after the cursor in the sort order (`forward`), or before it."""
    column, descending, is_time = _SORT_COLUMNS[filters.sort]
    value, last_id = decode_cursor(filters.sort, cursor)
    later = descending == forward  # moving toward smaller values
    if column is jobs.c.id:
        return jobs.c.id < last_id if later else jobs.c.id > last_id
    bound = sa.literal(value, UTCDateTime()) if is_time else sa.literal(value)
    if later:
        return sa.or_(column < bound, sa.and_(column == bound, jobs.c.id < last_id))
    return sa.or_(column > bound, sa.and_(column == bound, jobs.c.id > last_id))


def list_jobs(
    conn: sa.Connection,
    filters: JobFilters,
    after: str | None = None,
    *,
    before: str | None = None,
    now: datetime,
) -> Page:
    """One page of jobs matching `filters`, in the filter's sort order (keyset paging):
    the first page, the page `after` a cursor, or the page `before` one (read in the
    reverse order from the cursor, so going back costs what going forward does)."""
    column, descending, _ = _SORT_COLUMNS[filters.sort]
    query = sa.select(*_SUMMARY_COLUMNS).where(*filter_conditions(conn, filters, now))
    backward = before is not None and after is None
    if after:
        query = query.where(_beyond(filters, after, forward=True))
    elif before:
        query = query.where(_beyond(filters, before, forward=False))
    reverse = descending != backward
    if column is jobs.c.id:
        order = [jobs.c.id.desc() if reverse else jobs.c.id.asc()]
    else:
        order = [column.desc(), jobs.c.id.desc()] if reverse else [column.asc(), jobs.c.id.asc()]
    query = query.order_by(*order).limit(filters.page_size + 1)
    items = [JobSummary(**row._mapping) for row in conn.execute(query)]
    more = len(items) > filters.page_size
    items = items[: filters.page_size]
    if backward:
        items.reverse()
        # Going back: the page we came from follows; more rows before: another page back.
        next_cursor = _cursor_of(filters, items[-1]) if items else None
        previous = _cursor_of(filters, items[0]) if more and items else None
        return Page(items, next_cursor, previous)
    next_cursor = _cursor_of(filters, items[-1]) if more and items else None
    previous = _cursor_of(filters, items[0]) if after and items else None
    return Page(items, next_cursor, previous)


def count_matching(conn: sa.Connection, filters: JobFilters, *, now: datetime) -> int:
    query = sa.select(sa.func.count()).select_from(jobs)
    return int(conn.execute(query.where(*filter_conditions(conn, filters, now))).scalar_one())


# --- one job -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkedJob:
    id: int
    status: str
    resolution: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class GroupLane:
    """Where a job stands in its group's one-at-a-time lane."""

    key: str
    active_count: int
    position: int | None
    blocked_by: LinkedJob | None
    head: list[LinkedJob]


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: dict[str, Any]
    attempts: list[AttemptLine]
    deliveries: list[dict[str, Any]]
    report_runs: list[dict[str, Any]]
    audit: list[AuditRow]
    retried_from: LinkedJob | None
    retried_as: list[LinkedJob]
    group: GroupLane | None
    extra: dict[str, Any] = field(default_factory=dict)


def _linked(row: Any) -> LinkedJob:
    return LinkedJob(row.id, row.status, row.resolution, row.created_at)


_LINK_COLUMNS = (jobs.c.id, jobs.c.status, jobs.c.resolution, jobs.c.created_at)


def group_lane(conn: sa.Connection, job: dict[str, Any], limit: int = 10) -> GroupLane | None:
    """The group's active jobs in claim order and what this job waits for.

    Mirrors the claim's rule: a running job blocks its group; otherwise the first active
    job in (priority, id) order is the head, and a retrying (failed) head keeps the lane
    waiting for its next try. Dead and cancelled jobs do not block.
    """
    key = job["group_key"]
    if key is None:
        return None
    in_group = sa.and_(jobs.c.group_key == key, jobs.c.status.in_(sql_values(ACTIVE)))
    order = (
        sa.case((jobs.c.status == JobStatus.RUNNING.value, 0), else_=1),
        jobs.c.priority,
        jobs.c.id,
    )
    head = [
        _linked(r)
        for r in conn.execute(
            sa.select(*_LINK_COLUMNS).where(in_group).order_by(*order).limit(limit)
        )
    ]
    total = int(conn.execute(sa.select(sa.func.count()).where(in_group)).scalar_one())
    position = next((index for index, item in enumerate(head) if item.id == job["id"]), None)
    blocked_by = None
    if job["status"] in sql_values(CLAIMABLE):
        first = head[0] if head else None
        if first is not None and first.id != job["id"]:
            blocked_by = first
    return GroupLane(key, total, position, blocked_by, head)


def retries_of(conn: sa.Connection, job_id: int) -> list[LinkedJob]:
    """The jobs that retry `job_id` (still there even when `job_id` itself was pruned)."""
    return [
        _linked(r)
        for r in conn.execute(
            sa.select(*_LINK_COLUMNS).where(jobs.c.retried_from_id == job_id).order_by(jobs.c.id)
        )
    ]


def job_detail(conn: sa.Connection, job_id: int) -> JobDetail:
    """Everything the job page shows; raises NotFoundError for an unknown id."""
    documents = ("payload", "result", "progress")
    columns = [c for c in jobs.c if c.name not in documents]
    # The documents come as text and are decoded here, one by one: a stored document
    # too deep or not JSON at all (a plain-SQL insert) is shown as a problem, not a 500.
    texts = [sa.cast(jobs.c[name], sa.Text).label(name) for name in documents]
    row = conn.execute(sa.select(*columns, *texts).where(jobs.c.id == job_id)).one_or_none()
    if row is None:
        raise NotFoundError(f"job #{job_id} does not exist (it may have been pruned)")
    job = dict(row._mapping)
    for name in documents:
        decoded = decode_document(job[name], name)
        job[f"{name}_raw"] = job[name]
        job[name] = decoded.value
        job[f"{name}_problem"] = decoded.problem
    attempts = attempt_lines(
        dict(r._mapping)
        for r in conn.execute(
            sa.select(job_attempts)
            .where(job_attempts.c.job_id == job_id)
            .order_by(job_attempts.c.attempt, job_attempts.c.id)
        )
    )
    deliveries = [
        dict(r._mapping)
        for r in conn.execute(
            sa.select(webhook_deliveries)
            .where(webhook_deliveries.c.job_id == job_id)
            .order_by(webhook_deliveries.c.at.desc(), webhook_deliveries.c.id.desc())
            .limit(100)
        )
    ]
    runs = [
        dict(r._mapping)
        for r in conn.execute(
            sa.select(report_runs).where(report_runs.c.job_id == job_id).order_by(report_runs.c.id)
        )
    ]
    retried_from = None
    if job["retried_from_id"] is not None:
        parent = conn.execute(
            sa.select(*_LINK_COLUMNS).where(jobs.c.id == job["retried_from_id"])
        ).one_or_none()
        if parent is not None:
            retried_from = _linked(parent)
        else:  # pruned by retention: its tombstone still says what it was
            kept = tombstone(conn, job["retried_from_id"])
            if kept is not None:
                retried_from = LinkedJob(
                    kept["id"], kept["status"], kept["resolution"], kept["created_at"]
                )
    retried_as = retries_of(conn, job_id)
    return JobDetail(
        job=job,
        attempts=attempts,
        deliveries=deliveries,
        report_runs=runs,
        audit=entries_for_job(conn, job_id),
        retried_from=retried_from,
        retried_as=retried_as,
        group=group_lane(conn, job),
    )


def stored_document(conn: sa.Connection, job_id: int, name: str) -> str | None:
    """A job's payload or result as the stored JSON text, undecoded."""
    if name not in ("payload", "result"):
        raise ValueError(f"not a stored document: {name!r}")
    text = conn.execute(
        sa.select(sa.cast(jobs.c[name], sa.Text)).where(jobs.c.id == job_id)
    ).one_or_none()
    if text is None:
        raise NotFoundError(f"job #{job_id} does not exist")
    return text[0]


def job_status(conn: sa.Connection, job_id: int) -> dict[str, Any]:
    """The few fields a live status badge needs (polled while a job is active)."""
    row = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.status,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.progress,
            jobs.c.next_run_at,
            jobs.c.resolution,
        ).where(jobs.c.id == job_id)
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"job #{job_id} does not exist")
    return dict(row._mapping)
