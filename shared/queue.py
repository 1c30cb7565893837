"""Putting jobs in (`enqueue`, `enqueue_many`) and taking them out (`claim`).

Enqueue joins the caller's transaction: pass the SQLAlchemy `Connection` or `Session`
the app is already writing with, and the job commits or rolls back with the app's own
rows — "user created but no job" cannot happen. On PostgreSQL a `pg_notify` in the same
transaction wakes idle workers when (and only when) it commits.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session

from shared import validation
from shared.clock import db_now
from shared.db import is_postgresql
from shared.enqueue_sql import NOTIFY_CHANNEL, JobRow, insert_rows
from shared.errors import ValidationError
from shared.job_types import defaults_for
from shared.models import jobs
from shared.settings import Settings
from shared.sqltypes import UTCDateTime
from shared.states import ACTIVE, CLAIMABLE, JobStatus, sql_values

__all__ = [
    "NOTIFY_CHANNEL",
    "ClaimedJob",
    "JobRef",
    "NewJob",
    "claim",
    "connection_of",
    "enqueue",
    "enqueue_many",
]

#: `scoped_session` is what Flask-SQLAlchemy's `db.session` is.
Bind = sa.Connection | Session | scoped_session[Session]


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to enqueue; options left as None take the job type's defaults."""

    job_type: str
    payload: Mapping[str, Any]
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    group_key: str | None = None
    timeout: float | None = None


def connection_of(bind: object) -> sa.Connection:
    """The connection to write through, refusing binds that have no transaction to join."""
    if isinstance(bind, Session | scoped_session):
        return bind.connection()
    if isinstance(bind, sa.Connection):
        return bind
    if isinstance(bind, sa.Engine):
        raise TypeError(
            "enqueue needs a Connection or Session so the job joins your transaction; "
            "use `with engine.begin() as conn: enqueue(conn, ...)`"
        )
    raise TypeError(f"enqueue needs a SQLAlchemy Connection or Session, got {type(bind).__name__}")


def enqueue(
    bind: Bind,
    job_type: str,
    payload: Mapping[str, Any],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    group_key: str | None = None,
    timeout: float | None = None,
    max_payload_bytes: int | None = None,
) -> int:
    """Insert one job in the caller's transaction and return its id.

    Everything is validated first (`ValidationError` names the field); nothing is
    written when it fails. On PostgreSQL the same statement notifies idle workers,
    delivered only if the caller commits.

    Idempotency: a duplicate `idempotency_key` returns the existing job's id instead of
    raising — whatever that job's state: queued, running, succeeded, dead or cancelled.
    The key stays taken until the job is pruned; only then can it enqueue a new job.
    (Operator retries of a dead job create a new job that copies the key, for the
    effects ledger, but such retries are not counted by this check.) Under concurrent
    enqueues of one key on PostgreSQL, the later transaction waits for the earlier one
    and then gets its id (or inserts, if the earlier one rolled back).
    """
    conn = connection_of(bind)
    spec = NewJob(
        job_type,
        payload,
        queue,
        priority,
        run_at,
        max_attempts,
        idempotency_key,
        group_key,
        timeout,
    )
    row = _row_for(spec, max_payload_bytes or _configured_payload_limit())
    return insert_rows(conn, [row])[0]


def enqueue_many(
    bind: Bind,
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    max_payload_bytes: int | None = None,
) -> list[int]:
    """Insert many jobs (one statement on PostgreSQL); returns their ids in input order.

    Items are `NewJob`s or mappings with the same fields. Everything is validated before
    anything is written, so a bad item refuses the whole batch; the error names its
    index (`jobs[3].payload`). Idempotency works as in `enqueue`; a key repeated within
    the batch yields one job whose id is returned at every position that carries it.
    """
    conn = connection_of(bind)
    limit = max_payload_bytes or _configured_payload_limit()
    rows: list[JobRow] = []
    for index, item in enumerate(new_jobs):
        spec = item if isinstance(item, NewJob) else _spec_from_mapping(item, index)
        try:
            rows.append(_row_for(spec, limit))
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}].{exc.field}", exc.message) from None
    return insert_rows(conn, rows)


_payload_limit_cache: dict[str | None, int] = {}


def _configured_payload_limit() -> int:
    """`JOBDESK_MAX_PAYLOAD_BYTES`, re-read only when the variable changes."""
    raw = os.environ.get("JOBDESK_MAX_PAYLOAD_BYTES")
    limit = _payload_limit_cache.get(raw)
    if limit is None:
        settings = Settings.from_env({} if raw is None else {"JOBDESK_MAX_PAYLOAD_BYTES": raw})
        limit = _payload_limit_cache.setdefault(raw, settings.max_payload_bytes)
    return limit


_SPEC_FIELDS = frozenset(NewJob.__dataclass_fields__)


def _spec_from_mapping(item: object, index: int) -> NewJob:
    if not isinstance(item, Mapping):
        raise ValidationError(
            f"jobs[{index}]", f"must be a NewJob or a mapping, got {type(item).__name__}"
        )
    unknown = set(item) - _SPEC_FIELDS
    if unknown:
        shown = ", ".join(sorted(map(str, unknown)))
        raise ValidationError(f"jobs[{index}]", f"unknown option(s): {shown}")
    if "job_type" not in item or "payload" not in item:
        raise ValidationError(f"jobs[{index}]", "needs job_type and payload")
    return NewJob(**item)


def _row_for(spec: NewJob, payload_limit: int) -> JobRow:
    job_type = validation.check_name("job_type", spec.job_type)
    defaults = defaults_for(job_type)
    queue = validation.check_name("queue", spec.queue if spec.queue is not None else defaults.queue)
    priority = validation.check_priority(
        spec.priority if spec.priority is not None else defaults.priority
    )
    max_attempts = validation.check_max_attempts(
        spec.max_attempts if spec.max_attempts is not None else defaults.max_attempts
    )
    timeout = spec.timeout if spec.timeout is not None else defaults.timeout_seconds
    return JobRow(
        job_type,
        queue,
        validation.serialize_payload(spec.payload, payload_limit),
        priority,
        max_attempts,
        None if spec.run_at is None else validation.check_run_at(spec.run_at),
        validation.check_key("idempotency_key", spec.idempotency_key),
        validation.check_key("group_key", spec.group_key),
        None if timeout is None else validation.check_timeout(timeout),
    )


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker now holds under a lease; `lease_token` fences every later write."""

    id: int
    job_type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    idempotency_key: str | None
    group_key: str | None
    timeout_seconds: float | None
    lease_token: int
    lease_expires_at: datetime
    started_at: datetime
    worker_id: str

    @property
    def ref(self) -> JobRef:
        return JobRef(self.id, self.lease_token, self.attempt, self.worker_id, self.started_at)


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a worker needs to write the outcome of one attempt (compare-and-set key)."""

    id: int
    lease_token: int
    attempt: int
    worker_id: str
    started_at: datetime | None = None


_CLAIM_RETURNING = (
    jobs.c.id,
    jobs.c.job_type,
    jobs.c.queue,
    jobs.c.payload,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.priority,
    jobs.c.idempotency_key,
    jobs.c.group_key,
    jobs.c.timeout_seconds,
    jobs.c.lease_expires_at,
    jobs.c.next_run_at,
)


def _group_is_free() -> sa.ColumnElement[bool]:
    """True for a job with no group, or the head of a group with nothing running.

    Within a group, jobs run one at a time in (priority, id) order; a retrying head
    keeps its place (the group waits for it), a dead or cancelled one no longer blocks.
    """
    other = jobs.alias("group_peer")
    ahead = sa.or_(
        other.c.status == JobStatus.RUNNING.value,
        other.c.priority < jobs.c.priority,
        sa.and_(other.c.priority == jobs.c.priority, other.c.id < jobs.c.id),
    )
    blocked = sa.exists().where(
        other.c.group_key == jobs.c.group_key,
        other.c.status.in_(sql_values(ACTIVE)),
        other.c.id != jobs.c.id,
        ahead,
    )
    return sa.or_(jobs.c.group_key.is_(None), ~blocked)


def _candidates(
    queues: Sequence[str] | None, job_types: Sequence[str] | None, limit: int, now: datetime
) -> sa.Select[tuple[int]]:
    query = sa.select(jobs.c.id).where(
        jobs.c.status.in_(sql_values(CLAIMABLE)),
        jobs.c.next_run_at <= sa.bindparam("claim_now", now, type_=UTCDateTime()),
        # A row with no attempt left (written by hand or by an old bug) would break the
        # attempts CHECK and with it every claim; leave it to the operator instead.
        jobs.c.attempts < jobs.c.max_attempts,
        _group_is_free(),
    )
    if queues is not None:
        query = query.where(jobs.c.queue.in_(list(queues)))
    if job_types is not None:
        query = query.where(jobs.c.job_type.in_(list(job_types)))
    return query.order_by(jobs.c.priority, jobs.c.next_run_at, jobs.c.id).limit(limit)


def claim(
    conn: sa.Connection,
    *,
    worker_id: str,
    limit: int,
    queues: Sequence[str] | None = None,
    job_types: Sequence[str] | None = None,
    lease_seconds: float = 30.0,
    now: datetime | None = None,
) -> list[ClaimedJob]:
    """Atomically take up to `limit` due jobs, oldest first by (priority, next_run_at, id).

    One statement per dialect. PostgreSQL: the candidates are picked in a CTE with
    `FOR UPDATE SKIP LOCKED` — a CTE is evaluated exactly once, whereas a plain
    `id IN (subquery)` may be re-evaluated and update more rows than `limit`.
    SQLite: the caller's transaction began with `BEGIN IMMEDIATE`, so this is the only
    writer and `UPDATE … WHERE id IN (subquery)` is safe.

    `attempts` is incremented here, at claim time, so a job that kills its worker every
    time still runs out of attempts. Only `job_types` this worker knows are taken.
    """
    if (
        limit <= 0
        or (queues is not None and not queues)
        or (job_types is not None and not job_types)
    ):
        return []
    now = now or db_now(conn)
    token = secrets.randbits(62)
    expires = now + timedelta(seconds=lease_seconds)
    candidates = _candidates(queues, job_types, limit, now)
    if is_postgresql(conn):
        picked = candidates.with_for_update(skip_locked=True, of=jobs).cte("picked")
        target = jobs.c.id == picked.c.id
    else:
        target = jobs.c.id.in_(candidates.scalar_subquery())
    statement = (
        sa.update(jobs)
        .where(target)
        .values(
            status=JobStatus.RUNNING.value,
            attempts=jobs.c.attempts + 1,
            locked_by=worker_id,
            locked_at=now,
            started_at=now,
            lease_token=token,
            lease_expires_at=expires,
            updated_at=now,
        )
        .returning(*_CLAIM_RETURNING)
    )
    # RETURNING order is unspecified: hand jobs out in claim order.
    rows = sorted(conn.execute(statement), key=lambda r: (r.priority, r.next_run_at, r.id))
    return [
        ClaimedJob(
            id=row.id,
            job_type=row.job_type,
            queue=row.queue,
            payload=row.payload,
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            priority=row.priority,
            idempotency_key=row.idempotency_key,
            group_key=row.group_key,
            timeout_seconds=row.timeout_seconds,
            lease_token=token,
            lease_expires_at=row.lease_expires_at,
            started_at=now,
            worker_id=worker_id,
        )
        for row in rows
    ]
