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

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import Completion, Failure, HandBack
from jobdesk.shared.core.leases import renew_leases
from jobdesk.shared.core.masking import fingerprint, sanitize_error
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.retry import RetryPolicy, decide
from jobdesk.shared.core.states import AttemptOutcome, JobStatus

__all__ = [
    "Completion",
    "HandBack",
    "bury_undecodable",
    "complete",
    "complete_many",
    "extend_lease",
    "fail",
    "fail_many",
    "hand_back",
    "hand_back_many",
    "record_progress",
    "rescue_expired",
    "rescue_held",
    "snooze",
    "stop_cancelled",
]

log = logging.getLogger("jobdesk.transitions")


def complete(conn: sa.Connection, ref: JobRef, *, now: datetime, result: Any = None) -> bool:
    """Mark one attempt succeeded. False when the lease was lost (nothing written)."""
    return bool(complete_many(conn, [Completion(ref, result)], now=now))


def complete_many(
    conn: sa.Connection, completions: Sequence[Completion], *, now: datetime
) -> list[int]:
    """Mark many attempts succeeded; returns the ids actually completed (fenced ones are
    left out). Each completed job gets its `succeeded` attempt row in the same statement
    (PostgreSQL) or transaction (SQLite) — a batch is one statement, never one per job.
    `Completion.ref` may be the `ClaimedJob` itself (it has the `JobRef` fields)."""
    if not completions:
        return []
    done = driver(conn).complete_jobs(conn, completions, now=now)
    if len(done) != len(completions):
        lost = sorted({c.ref.id for c in completions} - set(done))
        log.warning(
            "lease lost; completion of jobs %s ignored",
            lost,
            extra={"action": "lease_lost", "job_ids": lost},
        )
    return done


def _failure(
    ref: JobRef,
    *,
    error: str,
    retry_at: datetime | None,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> Failure:
    """One failed attempt, its error made safe to store (masked, bounded) and
    fingerprinted for grouping."""
    clean = sanitize_error(error) or "unknown error"
    return Failure(ref, clean, fingerprint(clean), retry_at, outcome.value)


def fail_many(
    conn: sa.Connection, failures: Sequence[Failure], *, now: datetime
) -> dict[int, JobStatus]:
    """Record failed attempts in one statement: each job `failed` until its `retry_at`,
    or `dead` without one; `dead` too when its attempts are spent (a `failed` row without
    attempts left could never be claimed again); `cancelled` when an operator asked (the
    attempt recorded `cancelled`, not an error to group or alert on). Returns the new
    status of each job written; a lost lease is left out (and logged)."""
    if not failures:
        return {}
    written = driver(conn).fail_jobs(conn, failures, now=now)
    lost = sorted(f.ref.id for f in failures if f.ref.id not in written)
    if lost:
        log.warning(
            "lease lost; failure of jobs %s ignored",
            lost,
            extra={"action": "lease_lost", "job_ids": lost},
        )
    return written


def fail(
    conn: sa.Connection,
    ref: JobRef,
    *,
    error: str,
    retry_at: datetime | None,
    now: datetime,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> JobStatus | None:
    """Record one failed attempt (see `fail_many`): `failed` until `retry_at`, or `dead`
    when it is None. Returns the new status, or None when the lease was lost."""
    written = fail_many(
        conn, [_failure(ref, error=error, retry_at=retry_at, outcome=outcome)], now=now
    )
    return written.get(ref.id)


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
    a cancel request — `cancelled` (see `hand_back_many`). None when the lease was lost."""
    return hand_back_many(conn, [HandBack(ref, until)], now=now, reason=reason).get(ref.id)


def hand_back_many(
    conn: sa.Connection,
    handbacks: Sequence[HandBack],
    *,
    now: datetime,
    reason: str = "handed back",
) -> dict[int, JobStatus]:
    """Hand attempts back in one statement, none counted: each job `queued` until its
    `until`, or `cancelled` when an operator asked meanwhile — that attempt recorded with
    `reason` (snoozed, released at shutdown). Returns the new status of each job written;
    a lost lease is left out."""
    if not handbacks:
        return {}
    written = driver(conn).hand_back_jobs(conn, handbacks, now=now)
    for item in handbacks:
        if written.get(item.ref.id) is JobStatus.CANCELLED:
            note = f"Cancelled: the attempt was {reason} after the cancel request"
            driver(conn).record_attempt(
                conn, item.ref, outcome=AttemptOutcome.CANCELLED.value, error=note, now=now
            )
    return written


def stop_cancelled(conn: sa.Connection, ref: JobRef, *, error: str, now: datetime) -> bool:
    """End a running job whose cancel request its worker carried out (the handler stopped
    on `ctx.cancelled`, or was stopped hard after the grace): `cancelled`, the attempt
    recorded `cancelled` with `error`. Fenced like every worker write, and only for a job
    that has a cancel request. False when nothing was written."""
    if not driver(conn).stop_cancelled(conn, ref, now=now):
        log.warning(
            "lease lost; cancellation of job %s ignored",
            ref.id,
            extra={"action": "lease_lost", "job_id": ref.id},
        )
        return False
    driver(conn).record_attempt(
        conn, ref, outcome=AttemptOutcome.CANCELLED.value, error=sanitize_error(error), now=now
    )
    return True


def record_progress(conn: sa.Connection, ref: JobRef, progress: dict[str, Any]) -> bool:
    """Store the handler's progress while it still holds the job (fenced by the lease
    token like every worker write: a worker that lost its job cannot scribble on it)."""
    return driver(conn).record_progress(conn, ref, progress)


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
    """One batch of rescues: the rows read (passing over rows another transaction holds),
    each one's retry decided by its type's policy, then all failed in one statement."""
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
    failures = []
    for row in conn.execute(driver(conn).for_update(query, skip_locked=True)).all():
        policy = policy_for(row.job_type) if policy_for else None
        decision = decide(
            attempt=row.attempts, max_attempts=row.max_attempts, now=now, policy=policy
        )
        # A NULL token compares as `IS NULL` in the compare-and-set.
        ref = JobRef(row.id, row.lease_token, row.attempts, row.locked_by or "?", row.started_at)
        failures.append(
            _failure(
                ref, error=error_for(row), retry_at=decision.retry_at, outcome=AttemptOutcome.LOST
            )
        )
    written = fail_many(conn, failures, now=now)
    return [(f.ref.id, written[f.ref.id]) for f in failures if f.ref.id in written]
