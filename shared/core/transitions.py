"""Every write that moves a job between states, each a compare-and-set.

Worker-side transitions (`complete`, `fail`, `snooze`, `extend_lease`) only succeed while
the row is `running` with the caller's `lease_token`: a worker that was paused past its
lease, and whose job the reaper already handed to someone else, changes nothing and is
told so (the functions return False / None). Each finished attempt writes its
`job_attempts` row in the same statement or transaction.

A running job an operator asked to cancel (`cancel_requested_at` set) ends `cancelled`
whichever way its attempt ends — stopped on request (`stop_cancelled`), failed, snoozed,
released at shutdown or lost with its worker — and that attempt is recorded `cancelled`
(its error text says how it ended). Only a success stays a success: the work was done.

`states.TRANSITIONS` lists every function here (and in `decisions`, the operator's
side) with the states it moves jobs from and to; a test checks each pair against
`states.ALLOWED_TRANSITIONS`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, JobRef
from jobdesk.shared.core.db import dump_json, is_postgresql
from jobdesk.shared.core.leases import renew_leases
from jobdesk.shared.core.masking import fingerprint, sanitize_error
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.retry import RetryPolicy, decide
from jobdesk.shared.core.sqltypes import SQLITE_TIMESTAMP_FORMAT, UTCDateTime
from jobdesk.shared.core.states import AttemptOutcome, JobStatus

log = logging.getLogger("jobdesk.transitions")

R, Q, F, S, D, C = (
    JobStatus.RUNNING,
    JobStatus.QUEUED,
    JobStatus.FAILED,
    JobStatus.SUCCEEDED,
    JobStatus.DEAD,
    JobStatus.CANCELLED,
)

_RELEASE_LOCK: dict[str, Any] = {
    "locked_by": None,
    "locked_at": None,
    "lease_token": None,
    "lease_expires_at": None,
}


def _cancel_requested() -> sa.ColumnElement[bool]:
    return jobs.c.cancel_requested_at.is_not(None)


def _is_mine(ref: JobRef) -> sa.ColumnElement[bool]:
    return sa.and_(
        jobs.c.id == ref.id,
        jobs.c.status == JobStatus.RUNNING.value,
        jobs.c.lease_token == ref.lease_token,
    )


class Completion(NamedTuple):
    """One success to write. `ref` may be the `ClaimedJob` itself: it has the same
    `id`, `lease_token`, `attempt`, `worker_id` and `started_at` as its `JobRef`, and the
    completer saves building a `JobRef` per job that way (a NamedTuple, not a frozen
    dataclass, for the same reason: one of these per completed job)."""

    ref: JobRef | ClaimedJob
    result: Any = None


def complete(conn: sa.Connection, ref: JobRef, *, now: datetime, result: Any = None) -> bool:
    """Mark one attempt succeeded. False when the lease was lost (nothing written)."""
    return bool(complete_many(conn, [Completion(ref, result)], now=now))


def complete_many(
    conn: sa.Connection, completions: Sequence[Completion], *, now: datetime
) -> list[int]:
    """Mark many attempts succeeded; returns the ids actually completed (fenced ones are
    left out). Each completed job gets its `succeeded` attempt row in the same statement
    (PostgreSQL) or transaction (SQLite).

    This is the worker's hot path, so the SQL is fixed text sent through
    `exec_driver_sql`: one statement per batch on PostgreSQL, two per chunk of
    `_SQLITE_CHUNK` on SQLite — never one per job.
    """
    if not completions:
        return []
    if is_postgresql(conn):
        done = _complete_many_postgresql(conn, completions, now)
    else:
        done = []
        for start in range(0, len(completions), _SQLITE_CHUNK):
            done += _complete_many_sqlite(conn, completions[start : start + _SQLITE_CHUNK], now)
    if len(done) != len(completions):
        lost = sorted({c.ref.id for c in completions} - set(done))
        log.warning(
            "lease lost; completion of jobs %s ignored",
            lost,
            extra={"action": "lease_lost", "job_ids": lost},
        )
    return done


_SUCCEEDED_SET = f"""status = '{S.value}', finished_at = {{now}}, updated_at = {{now}},
       result = {{result}}, last_error = NULL, error_fingerprint = NULL, locked_by = NULL,
       locked_at = NULL, lease_token = NULL, lease_expires_at = NULL"""

# The batch travels as ONE JSON text `[[id, lease_token, worker_id, result], …]` (results
# are JSON already): one parameter parsed in C instead of per-element array adaptation.
# The CTE writes the attempt rows in the same statement, so a batch is one round trip.
# No locking step before the UPDATE: heartbeats, the only other multi-row writer of
# running jobs, skip rows a completion holds (`leases.renew_leases`) and so never wait
# on one. An ordered `FOR NO KEY UPDATE` CTE here cost a join the planner turned into a
# scan of every running row per completed job (80 ms per 1,000; 12 ms without it).
# The batch's jobs are found by primary key (`id = ANY(…)`), whatever else is running:
# the running check compares with a column of the (materialized) batch, because with
# `status = 'running'` written out the planner read every running row of the fleet
# through `ix_jobdesk_jobs_running_lease` and hashed them, once per batch — cheap with
# one worker, O(running jobs) per completion with many.
_POSTGRESQL_COMPLETE = f"""
WITH batch AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS worker,
           NULLIF(e->3, 'null'::jsonb) AS result, '{R.value}'::varchar AS running
      FROM jsonb_array_elements(%(rows)s::jsonb) AS e
), done AS (
    UPDATE jobdesk_jobs SET {_SUCCEEDED_SET.format(now="%(now)s", result="batch.result")}
      FROM batch
     WHERE jobdesk_jobs.id = ANY(ARRAY(SELECT id FROM batch))
       AND jobdesk_jobs.id = batch.id AND jobdesk_jobs.status = batch.running
       AND jobdesk_jobs.lease_token = batch.token
    RETURNING jobdesk_jobs.id, jobdesk_jobs.attempts, jobdesk_jobs.started_at, batch.worker
), attempts AS (
    INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, attempts, worker, started_at, %(now)s, '{AttemptOutcome.SUCCEEDED.value}'
      FROM done
)
SELECT array_agg(id) FROM done
"""


def _complete_many_postgresql(
    conn: sa.Connection, completions: Sequence[Completion], now: datetime
) -> list[int]:
    workers: dict[str, str] = {}
    parts = []
    for item in completions:
        ref = item.ref
        worker = workers.get(ref.worker_id)
        if worker is None:
            worker = workers[ref.worker_id] = json.dumps(ref.worker_id, ensure_ascii=False)
        result = "null" if item.result is None else dump_json(item.result)
        parts.append(f"[{int(ref.id)},{int(ref.lease_token)},{worker},{result}]")
    ids = conn.exec_driver_sql(
        _POSTGRESQL_COMPLETE, {"rows": f"[{','.join(parts)}]", "now": now}
    ).scalar()
    return list(ids or ())


#: Completions per SQLite statement (well under its bound-variable limit).
_SQLITE_CHUNK = 500
_sqlite_complete: dict[int, tuple[str, str]] = {}


def _sqlite_complete_statements(count: int) -> tuple[str, str]:
    """(UPDATE of `count` jobs, INSERT of `count` attempt rows) for SQLite."""
    statements = _sqlite_complete.get(count)
    if statements is None:
        values = ", ".join(["(?, ?, ?)"] * count)
        update = (
            f"WITH batch(id, token, result) AS (VALUES {values}) "
            f"UPDATE jobdesk_jobs SET {_SUCCEEDED_SET.format(now='?', result='batch.result')} "
            f"FROM batch WHERE jobdesk_jobs.id = batch.id AND jobdesk_jobs.status = '{R.value}' "
            "AND jobdesk_jobs.lease_token = batch.token "
            "RETURNING jobdesk_jobs.id, jobdesk_jobs.attempts, jobdesk_jobs.started_at"
        )
        rows = ", ".join(["(?, ?, ?, ?, ?, ?)"] * count)
        insert = (
            "INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at, "
            f"finished_at, outcome) VALUES {rows}"
        )
        statements = (update, insert)
        if len(_sqlite_complete) < 64:
            _sqlite_complete[count] = statements
    return statements


def _complete_many_sqlite(
    conn: sa.Connection, completions: Sequence[Completion], now: datetime
) -> list[int]:
    update, _ = _sqlite_complete_statements(len(completions))
    stamp = now.astimezone(UTC).strftime(SQLITE_TIMESTAMP_FORMAT)
    params: list[Any] = []
    for item in completions:
        result = None if item.result is None else dump_json(item.result)
        params += (item.ref.id, item.ref.lease_token, result)
    # The CTE's placeholders come first, then the SET clause's two `now`s.
    rows = conn.exec_driver_sql(update, (*params, stamp, stamp)).all()
    if not rows:
        return []
    workers = {c.ref.id: c.ref.worker_id for c in completions}
    _, insert = _sqlite_complete_statements(len(rows))
    outcome = AttemptOutcome.SUCCEEDED.value
    values: list[Any] = []
    for job_id, attempts, started_at in rows:
        values += (job_id, attempts, workers[job_id], started_at, stamp, outcome)
    conn.exec_driver_sql(insert, tuple(values))
    return [row[0] for row in rows]


def fail(
    conn: sa.Connection,
    ref: JobRef,
    *,
    error: str,
    retry_at: datetime | None,
    now: datetime,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> JobStatus | None:
    """Record a failed attempt: `failed` until `retry_at`, or `dead` when it is None.

    A job whose attempts are spent goes to `dead` even when a `retry_at` is given: a
    `failed` row without attempts left could never be claimed again. A job with a cancel
    request goes to `cancelled` instead (its attempt recorded `cancelled`).
    Returns the new status, or None when the lease was lost.
    """
    clean = sanitize_error(error) or "unknown error"
    print_ = fingerprint(clean)
    values: dict[str, Any] = {
        "last_error": clean,
        "error_fingerprint": print_,
        "updated_at": now,
        **_RELEASE_LOCK,
    }
    stop = _cancel_requested()
    if retry_at is not None:
        spent = jobs.c.attempts >= jobs.c.max_attempts
        values["status"] = sa.case((stop, C.value), (spent, D.value), else_=F.value)
        values["next_run_at"] = retry_at
        values["finished_at"] = sa.case(
            (sa.or_(stop, spent), sa.literal(now, UTCDateTime())), else_=None
        )
    else:
        values["status"] = sa.case((stop, C.value), else_=D.value)
        values["finished_at"] = now
    row = conn.execute(
        sa.update(jobs).where(_is_mine(ref)).values(**values).returning(jobs.c.status)
    ).first()
    if row is None:
        log.warning(
            "lease lost; failure of job %s ignored",
            ref.id,
            extra={"action": "lease_lost", "job_id": ref.id},
        )
        return None
    status = JobStatus(row.status)
    if status is C:
        # Not an error to group or alert on: an operator stopped the job.
        outcome, print_ = AttemptOutcome.CANCELLED, None
    _record_attempt(conn, ref, outcome, clean, now, print_)
    return status


def bury_undecodable(conn: sa.Connection, ref: JobRef, problem: str, *, now: datetime) -> bool:
    """A claimed job whose stored payload cannot be decoded: dead at once, the attempt
    recorded with the problem (no handler could ever run it; retrying cannot help)."""
    status = fail(
        conn,
        ref,
        error=f"PayloadNotDecodable: {problem}; fix it (or ignore the job) from its page",
        retry_at=None,
        now=now,
        outcome=AttemptOutcome.PERMANENT,
    )
    return status is not None


def snooze(conn: sa.Connection, ref: JobRef, *, until: datetime, now: datetime) -> bool:
    """Hand the job back without counting the attempt (rate limit, open breaker, shutdown).

    The attempt counter is decremented again because the handler never ran (or was
    stopped by us, not by the job). False when the lease was lost. See `hand_back`.
    """
    return hand_back(conn, ref, until=until, now=now) is not None


def hand_back(
    conn: sa.Connection,
    ref: JobRef,
    *,
    until: datetime,
    now: datetime,
    reason: str = "handed back",
) -> JobStatus | None:
    """`snooze`, answering where the job went: `queued` until `until`, or — for a job with
    a cancel request — `cancelled`, its attempt recorded with `reason` (snoozed, released
    at shutdown). None when the lease was lost."""
    stop = _cancel_requested()
    row = conn.execute(
        sa.update(jobs)
        .where(_is_mine(ref), jobs.c.attempts > 0)
        .values(
            status=sa.case((stop, C.value), else_=Q.value),
            attempts=sa.case((stop, jobs.c.attempts), else_=jobs.c.attempts - 1),
            next_run_at=until,
            finished_at=sa.case((stop, sa.literal(now, UTCDateTime())), else_=jobs.c.finished_at),
            updated_at=now,
            **_RELEASE_LOCK,
        )
        .returning(jobs.c.status)
    ).first()
    if row is None:
        return None
    if row.status == C.value:
        note = f"Cancelled: the attempt was {reason} after the cancel request"
        _record_attempt(conn, ref, AttemptOutcome.CANCELLED, note, now)
    return JobStatus(row.status)


def stop_cancelled(conn: sa.Connection, ref: JobRef, *, error: str, now: datetime) -> bool:
    """End a running job whose cancel request its worker carried out (the handler stopped
    on `ctx.cancelled`, or was stopped hard after the grace): `cancelled`, the attempt
    recorded `cancelled` with `error`. Fenced like every worker write, and only for a job
    that has a cancel request. False when nothing was written."""
    row = conn.execute(
        sa.update(jobs)
        .where(_is_mine(ref), _cancel_requested())
        .values(status=C.value, finished_at=now, updated_at=now, **_RELEASE_LOCK)
        .returning(jobs.c.id)
    ).first()
    if row is None:
        log.warning(
            "lease lost; cancellation of job %s ignored",
            ref.id,
            extra={"action": "lease_lost", "job_id": ref.id},
        )
        return False
    _record_attempt(conn, ref, AttemptOutcome.CANCELLED, sanitize_error(error), now)
    return True


def record_progress(conn: sa.Connection, ref: JobRef, progress: dict[str, Any]) -> bool:
    """Store the handler's progress while it still holds the job (fenced by the lease
    token like every worker write: a worker that lost its job cannot scribble on it)."""
    row = conn.execute(
        sa.update(jobs).where(_is_mine(ref)).values(progress=progress).returning(jobs.c.id)
    ).first()
    return row is not None


def extend_lease(
    conn: sa.Connection, refs: Sequence[JobRef], *, lease_seconds: float, now: datetime
) -> list[int]:
    """Heartbeat: push the lease expiry of jobs still held; returns the ids renewed.

    On PostgreSQL a job whose row another transaction holds is passed over, not waited
    for; `leases.renew_leases` tells those apart from jobs that were lost.
    """
    return renew_leases(conn, refs, lease_seconds=lease_seconds, now=now).renewed


def rescue_expired(
    conn: sa.Connection,
    *,
    now: datetime,
    policy_for: Callable[[str], RetryPolicy] | None = None,
    limit: int = 500,
) -> list[tuple[int, JobStatus]]:
    """Reaper step: jobs whose lease expired (their worker died or hung) go back to
    `failed` with backoff, or to `dead` when their attempts are spent. Error: "worker lost".
    A job an operator asked to cancel is not retried: it ends `cancelled` (see `fail`).

    A `running` row with no lease at all (written by plain SQL or by hand: a claim writes
    the status and the lease in one statement, and every move out of `running` clears
    them together) is held by no worker, and no worker ever will renew it: it is rescued
    at once, the same way, its error saying it had no lease.
    """

    def error_for(row: Any) -> str:
        if row.lease_expires_at is None:
            holder = f" (locked by {row.locked_by})" if row.locked_by else ""
            return (
                f"no lease: the job was running without a lease{holder}, so no worker "
                "could be running it or would ever finish it"
            )
        return f"worker lost: {row.locked_by} stopped renewing its lease"

    expired = sa.or_(jobs.c.lease_expires_at < now, jobs.c.lease_expires_at.is_(None))
    return _rescue(conn, expired, error_for, now=now, policy_for=policy_for, limit=limit)


def rescue_held(
    conn: sa.Connection,
    *,
    worker_id: str,
    error_for: Callable[[Any], str],
    now: datetime,
    policy_for: Callable[[str], RetryPolicy] | None = None,
    limit: int = 500,
) -> list[tuple[int, JobStatus]]:
    """Every job `worker_id` still holds, rescued like the reaper's (see
    `rescue_expired`) without waiting for the leases to run out: the worker is known to be
    ending (its watchdog gave up on it). `error_for(row)` says why, per job (the row has
    `id`, `lease_token`, `locked_by`)."""
    return _rescue(
        conn, jobs.c.locked_by == worker_id, error_for, now=now, policy_for=policy_for, limit=limit
    )


def _rescue(
    conn: sa.Connection,
    which: sa.ColumnElement[bool],
    error_for: Callable[[Any], str],
    *,
    now: datetime,
    policy_for: Callable[[str], RetryPolicy] | None,
    limit: int,
) -> list[tuple[int, JobStatus]]:
    query = (
        sa.select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.lease_token,
            jobs.c.locked_by,
            jobs.c.started_at,
            jobs.c.lease_expires_at,
        )
        .where(jobs.c.status == JobStatus.RUNNING.value, which)
        .order_by(jobs.c.lease_expires_at)
        .limit(limit)
    )
    if is_postgresql(conn):
        query = query.with_for_update(skip_locked=True)
    rescued: list[tuple[int, JobStatus]] = []
    for row in conn.execute(query).all():
        policy = policy_for(row.job_type) if policy_for else None
        decision = decide(
            attempt=row.attempts, max_attempts=row.max_attempts, now=now, policy=policy
        )
        # A NULL token compares as `IS NULL` in `fail`'s compare-and-set.
        ref = JobRef(row.id, row.lease_token, row.attempts, row.locked_by or "?", row.started_at)
        status = fail(
            conn,
            ref,
            error=error_for(row),
            retry_at=decision.retry_at,
            now=now,
            outcome=AttemptOutcome.LOST,
        )
        if status is not None:
            rescued.append((row.id, status))
    return rescued


def _record_attempt(
    conn: sa.Connection,
    ref: JobRef,
    outcome: AttemptOutcome,
    error: str | None,
    now: datetime,
    error_fingerprint: str | None = None,
) -> None:
    conn.execute(
        sa.insert(job_attempts).values(
            job_id=ref.id,
            attempt=ref.attempt,
            worker_id=ref.worker_id,
            started_at=ref.started_at,
            finished_at=now,
            outcome=outcome.value,
            error=error,
            error_fingerprint=error_fingerprint,
        )
    )
