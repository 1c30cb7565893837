"""The pruner: deletes what the retention policy says has been kept long enough.

Each category is deleted in batches (`JOBDESK_RETENTION_BATCH_SIZE`, default 1,000) with
an id cursor, one transaction per batch, at most `JOBDESK_RETENTION_MAX_BATCHES` batches
per category and run — a large backlog is worked off over several runs instead of one
long lock-holding DELETE. Unresolved dead letters are never touched (see
`jobdesk.shared.retention.pruning`). Expired report files are removed from disk before their rows.
A job's effects-ledger rows go in its batch (counted as `job_effects`); ledger rows that
belong to no job go by age (`unowned_effects`).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.retention import pruning as retention
from jobdesk.shared.retention.pruning import Batch
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings.retention import RetentionPolicy

log = logging.getLogger("jobdesk.maintenance.pruner")


@dataclass
class PruneResult:
    now: datetime
    deleted: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    files_removed: int = 0
    #: Categories that hit `max_batches` and continue on the next run.
    unfinished: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def interval_seconds(settings: Settings) -> float:
    return RetentionPolicy.from_settings(settings).interval_seconds


def run_once(engine: sa.Engine, now: datetime | None, settings: Settings) -> PruneResult:
    policy = RetentionPolicy.from_settings(settings)
    if now is None:
        with engine.connect() as conn:
            now = db_now(conn)
    result = PruneResult(now)
    job_rules = (
        ("succeeded_jobs", JobStatus.SUCCEEDED, policy.succeeded_days),
        ("cancelled_jobs", JobStatus.CANCELLED, policy.cancelled_days),
        ("resolved_dead_letters", JobStatus.DEAD, policy.resolved_dead_days),
    )
    for name, status, days in job_rules:
        if days is None:
            continue
        older_than = retention.cutoff(now, days)

        def prune_jobs(
            conn: sa.Connection,
            after: int,
            status: JobStatus = status,
            older: datetime = older_than,
        ) -> Batch:
            return retention.prune_jobs_batch(
                conn, status, older, after_id=after, limit=policy.batch_size, now=now
            )

        _drain(engine, name, prune_jobs, policy, result)
    if policy.succeeded_days is not None:
        older_batches = retention.cutoff(now, policy.succeeded_days)
        _drain(
            engine,
            "emptied_batches",
            lambda conn, after: retention.prune_batches_batch(
                conn, older_batches, after_id=after, limit=policy.batch_size
            ),
            policy,
            result,
        )
        _drain(
            engine,
            "ended_redrives",
            lambda conn, after: retention.prune_redrives_batch(
                conn, older_batches, after_id=after, limit=policy.batch_size
            ),
            policy,
            result,
        )
        _drain(
            engine,
            "idle_concurrency_keys",
            lambda conn, after: retention.prune_concurrency_keys_batch(
                conn, older_batches, limit=policy.batch_size
            ),
            policy,
            result,
        )
    if policy.alerts_days is not None:
        older = retention.cutoff(now, policy.alerts_days)
        _drain(
            engine,
            "resolved_alerts",
            lambda conn, after: retention.prune_alerts_batch(
                conn, older, after_id=after, limit=policy.batch_size
            ),
            policy,
            result,
        )
    if policy.audit_days is not None:
        older_audit = retention.cutoff(now, policy.audit_days)
        _drain(
            engine,
            "audit_entries",
            lambda conn, after: retention.prune_audit_batch(
                conn, older_audit, after_id=after, limit=policy.batch_size
            ),
            policy,
            result,
        )
    if policy.effects_days is not None:
        older_effects = retention.cutoff(now, policy.effects_days)
        _drain(
            engine,
            "unowned_effects",
            lambda conn, after: retention.prune_unowned_effects_batch(
                conn, older_effects, after_id=after, limit=policy.batch_size
            ),
            policy,
            result,
        )
    if policy.reports:
        _drain(
            engine,
            "expired_reports",
            lambda conn, after: _prune_reports(conn, now, after, policy.batch_size, result),
            policy,
            result,
        )
    if result.total:
        log.info(
            "pruned %d rows (%s)",
            result.total,
            ", ".join(f"{k}={v}" for k, v in result.deleted.items() if v),
            extra={"action": "pruned", "deleted": dict(result.deleted)},
        )
    return result


def _drain(
    engine: sa.Engine,
    name: str,
    step: Callable[[sa.Connection, int], Batch],
    policy: RetentionPolicy,
    result: PruneResult,
) -> None:
    cursor = 0
    for _ in range(policy.max_batches):
        with engine.begin() as conn:
            batch = step(conn, cursor)
        if batch.last_id is None:
            return
        result.batches[name] = result.batches.get(name, 0) + 1
        result.deleted[name] = result.deleted.get(name, 0) + batch.deleted
        if batch.effects:
            result.deleted["job_effects"] = result.deleted.get("job_effects", 0) + batch.effects
        cursor = batch.last_id
        if batch.deleted < policy.batch_size:
            return  # a short batch: nothing left behind the cursor
    result.unfinished.append(name)


def _prune_reports(
    conn: sa.Connection, now: datetime, after: int, limit: int, result: PruneResult
) -> Batch:
    expired = retention.expired_reports(conn, now, after_id=after, limit=limit)
    if not expired:
        return Batch(0, None)
    for report in expired:
        if report.file_path and _remove_file(report.file_path):
            result.files_removed += 1
    deleted = retention.delete_report_runs(conn, [r.id for r in expired], now)
    return Batch(deleted, expired[-1].id)


def _remove_file(path: str) -> bool:
    """Remove a report file; only regular files (or links), never directories."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("cannot inspect report file %s: %s", path, exc, extra={"action": "prune"})
        return False
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        log.warning("not removing %s: not a regular file", path, extra={"action": "prune"})
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
