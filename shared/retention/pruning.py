"""Retention: what the pruner may delete, and the batched deletes that do it.

Policy (`RetentionPolicy`, each configurable with `JOBDESK_RETENTION_<NAME>`;
`never`/`off` disables):

| what                                   | default  | variable                           |
|----------------------------------------|----------|------------------------------------|
| succeeded jobs (by `finished_at`)      | 7 days   | `JOBDESK_RETENTION_SUCCEEDED_DAYS`    |
| cancelled jobs (by `finished_at`)      | 30 days  | `JOBDESK_RETENTION_CANCELLED_DAYS`    |
| dead letters *with a resolution*       | 90 days  | `JOBDESK_RETENTION_RESOLVED_DEAD_DAYS` |
| report runs + files past `expires_at`  | on       | `JOBDESK_RETENTION_REPORTS`           |
| resolved alerts                        | never    | `JOBDESK_RETENTION_ALERTS_DAYS`       |
| audit log entries                      | never    | `JOBDESK_RETENTION_AUDIT_DAYS`        |
| effects-ledger rows without a job      | 30 days  | `JOBDESK_RETENTION_EFFECTS_DAYS`      |

Unresolved dead letters are never deleted: a human has not decided yet. A job's attempts
(by trigger: `jobdesk.shared.core.attempt_cleanup`) and webhook delivery log (`ON DELETE
CASCADE`) go with it, and so do its effects-ledger rows (`jobdesk_effects`): the ledger
remembers an effect as long as the job that did it, as the job's idempotency key is taken
as long as the job exists. Only a retry still carrying the pruned job's key takes its
done effects over, so it still skips them. Ledger rows that belong to no job — recorded
outside a job, or left by a job deleted by hand — go by age. A pruned dead or cancelled
job,
or a pruned retry, leaves a tombstone (id, type, final state, the decision: who, when,
why) in `jobdesk_job_tombstones`, so the audit trail and a retry's `retried_from_id` still
lead somewhere. Batches none of whose jobs is left and concurrency keys no job holds or
waits for go with the succeeded jobs' age.

Each function here deletes ONE batch (default 1,000 rows) chosen by an id cursor; the
pruner commits after every batch, so no transaction holds locks for long and a huge
backlog never becomes one giant DELETE.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.alerts.models import AlertStatus, alerts
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import (
    ACTIVE_KEYED_SQL,
    SLOT_WAITING_SQL,
    EffectState,
    effects,
    jobs,
)
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.flow.models import concurrency_keys
from jobdesk.shared.redrives.models import ACTIVE_STATES, redrive_items, redrives
from jobdesk.shared.reports.models import report_runs
from jobdesk.shared.retention.models import job_tombstones
from jobdesk.shared.settings.retention import RetentionPolicy
from jobdesk.shared.workflows.models import batches


def cutoff(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch's result: rows deleted and the cursor to continue after (and, for jobs,
    the effects-ledger rows deleted with them)."""

    deleted: int
    last_id: int | None
    effects: int = 0


def _delete_ids(conn: sa.Connection, table: sa.Table, ids: list[int], guard: Any) -> int:
    if not ids:
        return 0
    result = conn.execute(sa.delete(table).where(table.c.id.in_(ids), guard))
    return int(result.rowcount or 0)


def prune_jobs_batch(
    conn: sa.Connection,
    status: JobStatus,
    older_than: datetime,
    *,
    after_id: int = 0,
    limit: int = 1000,
    now: datetime | None = None,
) -> Batch:
    """Delete up to `limit` finished jobs of `status` that finished before `older_than`.

    Dead jobs qualify only when resolved (and resolved before `older_than`). Dead and
    cancelled jobs (someone decided about them) and retries (they name a dead job) leave
    a tombstone in the same transaction, so their audit rows and lineage still lead
    somewhere; plain succeeded jobs go without a trace.
    """
    if status not in (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD):
        raise ValueError(f"only final jobs are pruned, not {status}")
    guard = sa.and_(jobs.c.status == status.value, jobs.c.finished_at < older_than)
    if status is JobStatus.DEAD:
        guard = sa.and_(guard, jobs.c.resolution.is_not(None), jobs.c.resolved_at < older_than)
    ids = list(
        conn.execute(
            sa.select(jobs.c.id).where(guard, jobs.c.id > after_id).order_by(jobs.c.id).limit(limit)
        ).scalars()
    )
    if not ids:
        return Batch(0, None)
    _bury(conn, ids, guard, status, now or older_than)
    _hand_effects_to_retries(conn, ids)
    deleted = driver(conn).prune_jobs(conn, ids, guard)
    return Batch(deleted, ids[-1], _delete_effects_of_deleted(conn, ids))


#: Retry generations followed in one batch (a retry of a retry of …); real chains are short.
MAX_RETRY_GENERATIONS = 20


def _hand_effects_to_retries(conn: sa.Connection, ids: list[int]) -> None:
    """Done effects of jobs about to go whose retry stays pass to that retry: it carries
    the same idempotency key and counts on the ledger to skip what its original did."""
    retry = jobs.alias("retry")
    successor = (
        sa.select(sa.func.min(retry.c.id))
        .where(retry.c.retried_from_id == effects.c.job_id)
        .scalar_subquery()
    )
    # A row handed to a retry that goes in this batch too moves on in the next pass.
    for _ in range(MAX_RETRY_GENERATIONS):
        moved = conn.execute(
            sa.update(effects)
            .where(
                effects.c.job_id.in_(ids),
                effects.c.state == EffectState.DONE.value,
                sa.exists().where(retry.c.retried_from_id == effects.c.job_id),
            )
            .values(job_id=successor)
        )
        if not moved.rowcount:
            return


def _delete_effects_of_deleted(conn: sa.Connection, ids: list[int]) -> int:
    """Delete the ledger rows of the jobs of `ids` that are gone (a job the guard kept
    keeps its rows)."""
    kept = sa.select(jobs.c.id).where(jobs.c.id.in_(ids))
    result = conn.execute(
        sa.delete(effects).where(effects.c.job_id.in_(ids), effects.c.job_id.not_in(kept))
    )
    return int(result.rowcount or 0)


def prune_unowned_effects_batch(
    conn: sa.Connection, older_than: datetime, *, after_id: int = 0, limit: int = 1000
) -> Batch:
    """Delete effects-ledger rows recorded before `older_than` that belong to no job (no
    job id, or their job no longer exists). A job's own rows go with the job."""
    owned = sa.exists().where(jobs.c.id == effects.c.job_id)
    guard = sa.and_(effects.c.created_at < older_than, ~owned)
    ids = list(
        conn.execute(
            sa.select(effects.c.id)
            .where(guard, effects.c.id > after_id)
            .order_by(effects.c.id)
            .limit(limit)
        ).scalars()
    )
    return Batch(_delete_ids(conn, effects, ids, guard), ids[-1] if ids else None)


def prune_batches_batch(
    conn: sa.Connection, older_than: datetime, *, after_id: int = 0, limit: int = 1000
) -> Batch:
    """Delete batches created before `older_than` none of whose jobs is left: every
    child and callback was pruned with its own retention (a batch outlives its jobs only
    as long as one of them is kept)."""
    child = sa.exists().where(jobs.c.batch_id == batches.c.id)
    callback = sa.exists().where(
        jobs.c.id.in_([batches.c.on_success_job_id, batches.c.on_finish_job_id])
    )
    guard = sa.and_(batches.c.created_at < older_than, ~child, ~callback)
    ids = list(
        conn.execute(
            sa.select(batches.c.id)
            .where(guard, batches.c.id > after_id)
            .order_by(batches.c.id)
            .limit(limit)
        ).scalars()
    )
    return Batch(_delete_ids(conn, batches, ids, guard), ids[-1] if ids else None)


def prune_redrives_batch(
    conn: sa.Connection, older_than: datetime, *, after_id: int = 0, limit: int = 1000
) -> Batch:
    """Delete redrives that ended before `older_than`, with their per-job rows (the audit
    log keeps every requeue and every change of state)."""
    ended = sa.and_(
        redrives.c.finished_at < older_than,
        redrives.c.state.not_in([state.value for state in ACTIVE_STATES]),
    )
    ids = list(
        conn.execute(
            sa.select(redrives.c.id)
            .where(ended, redrives.c.id > after_id)
            .order_by(redrives.c.id)
            .limit(limit)
        ).scalars()
    )
    if ids:
        conn.execute(sa.delete(redrive_items).where(redrive_items.c.redrive_id.in_(ids)))
    return Batch(_delete_ids(conn, redrives, ids, ended), ids[-1] if ids else None)


def prune_concurrency_keys_batch(
    conn: sa.Connection, older_than: datetime, *, limit: int = 1000
) -> Batch:
    """Delete concurrency keys unused since `older_than` that no job holds or waits for
    (the next enqueue with the key makes its row again). No cursor: what is deleted is
    gone, so each batch takes the next idle keys."""
    key = concurrency_keys.c.key
    in_use = sa.exists().where(
        jobs.c.concurrency_key == key,
        sa.or_(sa.text(ACTIVE_KEYED_SQL), sa.text(SLOT_WAITING_SQL)),
    )
    guard = sa.and_(concurrency_keys.c.updated_at < older_than, ~in_use)
    keys = list(conn.execute(sa.select(key).where(guard).order_by(key).limit(limit)).scalars())
    if not keys:
        return Batch(0, None)
    deleted = conn.execute(sa.delete(concurrency_keys).where(key.in_(keys), guard)).rowcount
    return Batch(deleted, len(keys))


_TOMBSTONE_COLUMNS = (
    "id", "job_type", "queue", "status", "attempts", "idempotency_key", "created_at",
    "finished_at", "retried_from_id", "resolution", "resolved_by", "resolved_at",
    "resolution_reason",
)  # fmt: skip
#: The last error kept on a tombstone (the attempts' full history goes with the job).
TOMBSTONE_ERROR_CHARS = 2000


def _bury(
    conn: sa.Connection, ids: list[int], guard: Any, status: JobStatus, now: datetime
) -> None:
    worth_keeping = (
        jobs.c.retried_from_id.is_not(None) if status is JobStatus.SUCCEEDED else sa.true()
    )
    source = sa.select(
        *(jobs.c[name] for name in _TOMBSTONE_COLUMNS),
        sa.func.substr(jobs.c.last_error, 1, TOMBSTONE_ERROR_CHARS),
        sa.literal(now, jobs.c.created_at.type),
    ).where(jobs.c.id.in_(ids), guard, worth_keeping)
    conn.execute(
        sa.insert(job_tombstones).from_select(
            [*_TOMBSTONE_COLUMNS, "last_error", "pruned_at"], source
        )
    )


def tombstone(conn: sa.Connection, job_id: int) -> dict[str, Any] | None:
    """What is kept of a pruned job, or None (never pruned, or pruned without a trace)."""
    row = conn.execute(sa.select(job_tombstones).where(job_tombstones.c.id == job_id)).first()
    return None if row is None else dict(row._mapping)


@dataclass(frozen=True, slots=True)
class ExpiredReport:
    id: int
    file_path: str | None


def expired_reports(
    conn: sa.Connection, now: datetime, *, after_id: int = 0, limit: int = 1000
) -> list[ExpiredReport]:
    """The next batch of report runs past `expires_at` (id order); nothing is deleted.

    The pruner removes the files first and then calls `delete_report_runs` in the same
    transaction, so a failed commit leaves rows pointing at already-missing files (which
    the next run cleans up) rather than files nobody knows about.
    """
    rows = conn.execute(
        sa.select(report_runs.c.id, report_runs.c.file_path)
        .where(report_runs.c.expires_at < now, report_runs.c.id > after_id)
        .order_by(report_runs.c.id)
        .limit(limit)
    )
    return [ExpiredReport(row.id, row.file_path) for row in rows]


def delete_report_runs(conn: sa.Connection, ids: list[int], now: datetime) -> int:
    """Delete expired report runs (their chunk results cascade)."""
    return _delete_ids(conn, report_runs, ids, report_runs.c.expires_at < now)


def prune_alerts_batch(
    conn: sa.Connection, older_than: datetime, *, after_id: int = 0, limit: int = 1000
) -> Batch:
    """Delete resolved alerts that resolved before `older_than` (open ones never)."""
    guard = sa.and_(alerts.c.status == AlertStatus.RESOLVED, alerts.c.resolved_at < older_than)
    ids = list(
        conn.execute(
            sa.select(alerts.c.id)
            .where(guard, alerts.c.id > after_id)
            .order_by(alerts.c.id)
            .limit(limit)
        ).scalars()
    )
    return Batch(_delete_ids(conn, alerts, ids, guard), ids[-1] if ids else None)


def prune_audit_batch(
    conn: sa.Connection, older_than: datetime, *, after_id: int = 0, limit: int = 1000
) -> Batch:
    """Delete audit entries older than `older_than` (only when retention is configured)."""
    guard = audit_log.c.at < older_than
    ids = list(
        conn.execute(
            sa.select(audit_log.c.id)
            .where(guard, audit_log.c.id > after_id)
            .order_by(audit_log.c.id)
            .limit(limit)
        ).scalars()
    )
    return Batch(_delete_ids(conn, audit_log, ids, guard), ids[-1] if ids else None)


def describe(policy: RetentionPolicy) -> list[dict[str, Any]]:
    """The policy as rows for the dashboard / CLI ("what is kept for how long")."""

    def days(value: float | None) -> str:
        return "forever" if value is None else f"{value:g} days"

    return [
        {"what": "succeeded jobs", "kept": days(policy.succeeded_days),
         "env": "JOBDESK_RETENTION_SUCCEEDED_DAYS"},
        {"what": "cancelled jobs", "kept": days(policy.cancelled_days),
         "env": "JOBDESK_RETENTION_CANCELLED_DAYS"},
        {"what": "resolved dead letters", "kept": days(policy.resolved_dead_days),
         "env": "JOBDESK_RETENTION_RESOLVED_DEAD_DAYS"},
        {"what": "unresolved dead letters", "kept": "forever (until triaged)", "env": None},
        {"what": "report files", "kept": "until expiry" if policy.reports else "forever",
         "env": "JOBDESK_RETENTION_REPORTS"},
        {"what": "resolved alerts", "kept": days(policy.alerts_days),
         "env": "JOBDESK_RETENTION_ALERTS_DAYS"},
        {"what": "audit log", "kept": days(policy.audit_days),
         "env": "JOBDESK_RETENTION_AUDIT_DAYS"},
        {"what": "effects ledger", "kept": "as long as its job", "env": None},
        {"what": "effects ledger rows without a job", "kept": days(policy.effects_days),
         "env": "JOBDESK_RETENTION_EFFECTS_DAYS"},
    ]  # fmt: skip
