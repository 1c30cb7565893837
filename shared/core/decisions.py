"""Operator decisions on jobs: the transitions a person triggers, each audited.

Worker-side moves (complete, fail, snooze, rescue) live in `transitions`; these are the
ones that come from the dashboard, the CLI or a feature acting for an operator:

- `resolve_dead`: write a decision ON dead jobs (`requeued`, `fixed`, `ignored` + who,
  when, why) with a compare-and-set `WHERE status = 'dead' AND resolution IS NULL`, so
  of two operators acting on one job the second changes nothing;
- `requeue_dead`: retry dead jobs as NEW jobs — the one way it is done, for triage and
  report chunks alike: resolve, copy (type, queue, payload, priority, attempts, timeout,
  group and idempotency key; `retried_from_id` → the dead one), wake the workers, audit;
  types no worker can run are refused, not queued to wait forever;
- `ignore_dead`: resolve as ignored with a reason;
- `cancel`: stop queued or retrying jobs from running again;
- `request_cancel`: ask the worker running a job to stop it (it ends `cancelled`);
- `apply_cancel_requests`: the reaper's pass moving requests that found their job's row
  locked onto the job.

Both keep who, when and why on the job (`cancelled_by`, `cancel_requested_at`,
`cancel_reason`), so the job's page can say it without reading the audit trail.

A cancel request never waits on a running job's row lock. On PostgreSQL the row is
taken with `SKIP LOCKED`; a row another transaction holds — a worker frozen inside its
heartbeat's transaction holds its jobs' rows until the server ends that session, up to
half a lease — gets its request in `jobdesk_cancel_requests` instead, and the reaper's
next pass moves it onto the job (or cancels the job outright when it has meanwhile gone
back to the queue). The operator's answer is the same either way, at once.

Each writes its audit rows in the caller's transaction, so a decision and its record
commit together. Dead jobs never change state: the decision is on the row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import cancel_requests, jobs
from jobdesk.shared.core.states import (
    CANCELLABLE,
    STOPPABLE,
    JobStatus,
    Resolution,
    sql_values,
)
from jobdesk.shared.core.validation import serialize_payload
from jobdesk.shared.core.worker_registry import runnable_types
from jobdesk.shared.secrets.store import copy_secrets
from jobdesk.shared.workflows import batches, dependencies

__all__ = [
    "Requeued",
    "apply_cancel_requests",
    "cancel",
    "ignore_dead",
    "request_cancel",
    "requeue_dead",
    "resolve_dead",
]

#: Parked cancel requests moved onto their jobs per reaper pass.
CANCEL_REQUEST_BATCH = 500

#: What a retry copies from the dead job to the new one.
COPIED = (
    "job_type",
    "queue",
    "payload",
    "priority",
    "max_attempts",
    "timeout_seconds",
    "group_key",
    "idempotency_key",
    "batch_id",
    "concurrency_key",
    "concurrency_limit",
)


@dataclass(frozen=True, slots=True)
class Requeued:
    """The outcome of `requeue_dead`: dead id → new job id (in id order), and the jobs
    skipped because no worker runs their type."""

    new_ids: dict[int, int]
    unknown_type: tuple[int, ...] = ()


def resolve_dead(
    conn: sa.Connection,
    ids: Sequence[int],
    resolution: Resolution,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
) -> list[int]:
    """The compare-and-set: mark still-unresolved dead jobs; returns those it marked.
    Writes no audit row (its callers do, knowing what the decision was for)."""
    if not ids:
        return []
    return driver(conn).resolve_dead(
        conn, ids, resolution.value, actor=actor, reason=reason, now=now
    )


def requeue_dead(
    conn: sa.Connection,
    ids: Sequence[int],
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    action: AuditAction = AuditAction.RETRY,
    resolution: Resolution = Resolution.REQUEUED,
    payload: Mapping[str, Any] | None = None,
    subject: str | None = None,
    details: Mapping[str, Any] | None = None,
    details_for: Mapping[int, Mapping[str, Any]] | None = None,
) -> Requeued:
    """Retry the still-unresolved dead jobs among `ids` as new jobs (see the module).

    `payload` replaces the copied payload (fix & retry of one job; already validated by
    the caller). Audit rows carry `action`, `subject`, `details` (plus `details_for[id]`).
    """
    if not ids:
        return Requeued({})
    if payload is not None and len(ids) != 1:
        raise ValueError("a replacement payload is for one job at a time")
    candidates = conn.execute(
        sa.select(jobs.c.id, jobs.c.job_type).where(
            jobs.c.id.in_(list(ids)),
            jobs.c.status == JobStatus.DEAD.value,
            jobs.c.resolution.is_(None),
        )
    ).all()
    runnable = runnable_types(conn)
    unknown = tuple(sorted(row.id for row in candidates if row.job_type not in runnable))
    wanted = sorted(row.id for row in candidates if row.job_type in runnable)
    resolved = resolve_dead(conn, wanted, resolution, actor=actor, reason=reason, now=now)
    mapping = _copy_as_new(conn, resolved, now)
    copy_secrets(conn, mapping)  # sealed as they are: a retry needs no key
    # The retry takes the dead job's place: in its batch and for the jobs after= it.
    batches.hand_over(conn, mapping)
    dependencies.hand_over(conn, mapping)
    if payload is not None and mapping:
        driver(conn).set_payload(conn, list(mapping.values()), serialize_payload(payload))
    _notify(conn, mapping.values())
    audit.record_many(
        conn,
        (
            {
                "actor": actor,
                "action": action,
                "job_id": old,
                "new_job_id": new,
                "subject": subject,
                "reason": reason,
                "details": _details(details, (details_for or {}).get(old)),
            }
            for old, new in mapping.items()
        ),
        now=now,
    )
    return Requeued(mapping, unknown)


def ignore_dead(
    conn: sa.Connection,
    ids: Sequence[int],
    *,
    actor: str,
    reason: str,
    now: datetime,
    details: Mapping[str, Any] | None = None,
) -> list[int]:
    """Resolve the still-unresolved dead jobs among `ids` as ignored; returns them.

    What waited for them can no longer run: the jobs enqueued `after=` them and the
    `on_success` callbacks of their batches are cancelled (each audited)."""
    resolved = resolve_dead(conn, ids, Resolution.IGNORED, actor=actor, reason=reason, now=now)
    _cancel_what_waits(conn, resolved, actor=actor, verb="was ignored", reason=reason, now=now)
    audit.record_many(
        conn,
        (
            {
                "actor": actor,
                "action": AuditAction.IGNORE,
                "job_id": job_id,
                "reason": reason,
                "details": _details(details, None),
            }
            for job_id in resolved
        ),
        now=now,
    )
    return resolved


def cancel(
    conn: sa.Connection,
    job_ids: Sequence[int],
    *,
    actor: str,
    reason: str,
    now: datetime,
    subject: str | None = None,
) -> list[int]:
    """Stop queued, retrying or waiting jobs from running again; returns the ones
    cancelled. What waited for them is cancelled too (each audited): the jobs enqueued
    `after=` them and, for a batch child, its batch's `on_success`."""
    if not job_ids:
        return []
    cancelled = _cancel_rows(conn, job_ids, actor=actor, reason=reason, asked_at=now, now=now)
    _audit_cancel(conn, cancelled, actor=actor, reason=reason, now=now, subject=subject)
    _cancel_what_waits(conn, cancelled, actor=actor, verb="was cancelled", reason=reason, now=now)
    return cancelled


def _waited_for(ids: Sequence[int], verb: str, reason: str) -> str:
    named = ", ".join(f"#{job_id}" for job_id in ids[:5]) + (" …" if len(ids) > 5 else "")
    return f"job {named} it waited for {verb}: {reason}"


def _cancel_what_waits(
    conn: sa.Connection, ids: Sequence[int], *, actor: str, verb: str, reason: str, now: datetime
) -> None:
    """Cancel the dependents of jobs that will never succeed, and the `on_success`
    callbacks of their batches."""
    if not ids:
        return
    why = _waited_for(ids, verb, reason)
    dependencies.cancel_dependents(conn, ids, actor=actor, why=why, now=now)
    callbacks = batches.waiting_success_callbacks(conn, ids)
    if callbacks:
        cancel(conn, callbacks, actor=actor, reason=why, now=now, subject="batch on_success")


def _cancel_rows(
    conn: sa.Connection,
    job_ids: Sequence[int],
    *,
    actor: str,
    reason: str,
    asked_at: datetime,
    now: datetime,
) -> list[int]:
    return driver(conn).cancel_jobs(
        conn, job_ids, actor=actor, reason=reason, asked_at=asked_at, now=now
    )


def request_cancel(
    conn: sa.Connection,
    job_ids: Sequence[int],
    *,
    actor: str,
    reason: str,
    now: datetime,
    subject: str | None = None,
) -> list[int]:
    """Ask the workers running these jobs to stop them; returns the ids asked.

    The job stays `running`: its worker reads the request with its next heartbeat, sets
    `ctx.cancelled` and, after the grace, stops the handler hard; the job then ends
    `cancelled`. A job already asked is left as it is (the first request's who and why
    stay), so a double-submitted form writes one request and one audit row. Never waits
    on a locked row: see the module.
    """
    if not job_ids:
        return []
    asked, locked = driver(conn).request_cancel(
        conn, job_ids, actor=actor, reason=reason, asked_at=now, now=now
    )
    asked = sorted(asked + _park(conn, locked, actor, reason, now))
    _audit_cancel(
        conn,
        asked,
        actor=actor,
        reason=reason,
        now=now,
        subject=subject,
        details={"while_running": True},
    )
    _cancel_what_waits(conn, asked, actor=actor, verb="is being cancelled", reason=reason, now=now)
    return asked


def _park(
    conn: sa.Connection, locked: Sequence[int], actor: str, reason: str, now: datetime
) -> list[int]:
    """Requests for running jobs whose row was locked: into `jobdesk_cancel_requests`
    (a request already parked is left as it is)."""
    if not locked:
        return []
    statement = (
        driver(conn)
        .insert(cancel_requests)
        .values(
            [
                {"job_id": job_id, "requested_at": now, "requested_by": actor, "reason": reason}
                for job_id in locked
            ]
        )
        .on_conflict_do_nothing(index_elements=[cancel_requests.c.job_id])
        .returning(cancel_requests.c.job_id)
    )
    return list(conn.execute(statement).scalars())


def apply_cancel_requests(conn: sa.Connection, *, now: datetime) -> list[int]:
    """Move parked cancel requests onto their jobs (the reaper, before its rescue, so a
    job whose worker froze ends `cancelled` rather than retried); returns the jobs it
    changed. A running job gets the request like `request_cancel` gives it; one that
    went back to the queue meanwhile is cancelled, as its operator asked; requests of
    finished or deleted jobs are dropped. A row that is still locked keeps its request
    for the next pass. The request was audited when it was made."""
    pending = conn.execute(
        sa.select(cancel_requests)
        .order_by(cancel_requests.c.requested_at)
        .limit(CANCEL_REQUEST_BATCH)
    ).all()
    changed: list[int] = []
    done: list[int] = []
    for request in pending:
        query = sa.select(jobs.c.status, jobs.c.cancel_requested_at).where(
            jobs.c.id == request.job_id
        )
        row = conn.execute(driver(conn).for_update(query, skip_locked=True, key_share=True)).first()
        if row is None:
            exists = conn.execute(sa.select(jobs.c.id).where(jobs.c.id == request.job_id)).first()
            if exists is not None:
                continue  # still locked: next pass
        elif row.status in sql_values(STOPPABLE) and row.cancel_requested_at is None:
            asked, _ = driver(conn).request_cancel(
                conn,
                [request.job_id],
                actor=request.requested_by,
                reason=request.reason,
                asked_at=request.requested_at,
                now=now,
            )
            changed += asked
        elif row.status in sql_values(CANCELLABLE):
            changed += _cancel_rows(
                conn,
                [request.job_id],
                actor=request.requested_by,
                reason=request.reason,
                asked_at=request.requested_at,
                now=now,
            )
        done.append(request.job_id)
    if done:
        conn.execute(sa.delete(cancel_requests).where(cancel_requests.c.job_id.in_(done)))
    return changed


def _audit_cancel(
    conn: sa.Connection,
    job_ids: Sequence[int],
    *,
    actor: str,
    reason: str,
    now: datetime,
    subject: str | None,
    details: Mapping[str, Any] | None = None,
) -> None:
    audit.record_many(
        conn,
        (
            {
                "actor": actor,
                "action": AuditAction.CANCEL,
                "job_id": job_id,
                "subject": subject,
                "reason": reason,
                "details": dict(details) if details else None,
            }
            for job_id in job_ids
        ),
        now=now,
    )


def _details(
    shared: Mapping[str, Any] | None, own: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    if shared is None and own is None:
        return None
    return {**(shared or {}), **(own or {})}


def _copy_as_new(conn: sa.Connection, ids: Sequence[int], now: datetime) -> dict[int, int]:
    """New queued jobs copied from dead ones; returns {dead id: new id}."""
    if not ids:
        return {}
    return driver(conn).copy_as_new(conn, ids, COPIED, now=now)


def _notify(conn: sa.Connection, new_ids: Iterable[int]) -> None:
    """Wake idle workers for the queues that just received jobs; delivered when the
    caller commits, like an enqueue's."""
    ids = list(new_ids)
    if not ids or not driver(conn).listens:
        return
    queues = conn.execute(sa.select(jobs.c.queue).where(jobs.c.id.in_(ids)).distinct()).scalars()
    driver(conn).notify_queues(conn, list(queues))
