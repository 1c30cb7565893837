"""`after=`: a job that runs once every listed job succeeded.

At enqueue the listed jobs are flagged `watched` and locked in id order (`UPDATE …
RETURNING status`, which on PostgreSQL waits for a completion being written and then
reads its outcome), so a dependency either had succeeded before — it counts as met — or
its success comes after and the settle trigger sees the flag: no success is missed
between the look and the insert. The new job starts `waiting` with `waiting_for` =
the dependencies not yet succeeded (or `queued` when all are), and one
`jobdesk_job_dependencies` row per dependency, met or not (its page draws them).

Cycles cannot be made: a job can only name jobs that exist before it. A listed job that
does not exist is refused (also one retention pruned: what it did is no longer known).

A dependency that ends `dead` or `cancelled` holds its dependents (`why_waiting` says
so). A triage retry hands the dependency over to the new job (`hand_over`); ignoring a
dead dependency, or cancelling one, cancels its waiting dependents, each audited
(`cancel_dependents`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.workflows.models import job_dependencies

#: How many jobs one job may wait for.
MAX_DEPENDENCIES = 1000


def check_after(after: object) -> tuple[int, ...]:
    """`after=` as sorted distinct job ids; a clear error for anything else."""
    if after is None:
        return ()
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise ValidationError("after", f"must be a list of job ids, got {type(after).__name__}")
    ids: set[int] = set()
    for item in after:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ValidationError("after", f"job ids are positive integers, got {item!r}")
        ids.add(item)
    if len(ids) > MAX_DEPENDENCIES:
        raise ValidationError("after", f"at most {MAX_DEPENDENCIES} jobs, got {len(ids)}")
    return tuple(sorted(ids))


def unmet(conn: sa.Connection, after: Sequence[int]) -> int:
    """Flag the jobs of `after` watched (locking them) and count those not succeeded;
    `ValidationError` naming a job that does not exist."""
    if not after:
        return 0
    found = driver(conn).watch_jobs(conn, after)
    missing = [job_id for job_id in after if job_id not in found]
    if missing:
        raise ValidationError(
            "after", f"job {missing[0]} does not exist (never enqueued, or pruned)"
        )
    return sum(1 for status in found.values() if status != JobStatus.SUCCEEDED.value)


def record(conn: sa.Connection, job_ids: Iterable[int], after: Sequence[int]) -> None:
    """The dependency rows of new jobs that wait for `after`."""
    rows = [{"job_id": job_id, "depends_on_id": dep} for job_id in job_ids for dep in after]
    if rows:
        conn.execute(sa.insert(job_dependencies), rows)


def hand_over(conn: sa.Connection, retried: Mapping[int, int]) -> None:
    """Triage retried dead jobs (old id -> new id): their dependents now wait for the new
    jobs, which are watched like the old ones were."""
    if not retried:
        return
    watched = [
        new
        for old, new in retried.items()
        if conn.execute(
            sa.update(job_dependencies)
            .where(job_dependencies.c.depends_on_id == old)
            .values(depends_on_id=new)
        ).rowcount
    ]
    driver(conn).watch_jobs(conn, watched)


def waiting_dependents(conn: sa.Connection, job_ids: Sequence[int]) -> list[int]:
    """The waiting jobs that wait for any of `job_ids`, and theirs in turn (a chain
    A -> B -> C: cancelling A leaves B and C nothing to wait for)."""
    found: set[int] = set()
    frontier = list(job_ids)
    while frontier:
        rows = conn.execute(
            sa.select(jobs.c.id)
            .join(job_dependencies, job_dependencies.c.job_id == jobs.c.id)
            .where(
                job_dependencies.c.depends_on_id.in_(frontier),
                jobs.c.status == JobStatus.WAITING.value,
            )
        ).scalars()
        frontier = [job_id for job_id in rows if job_id not in found]
        found.update(frontier)
    return sorted(found)


def cancel_dependents(
    conn: sa.Connection,
    job_ids: Sequence[int],
    *,
    actor: str,
    why: str,
    now: datetime,
) -> list[int]:
    """Cancel the waiting dependents of jobs that will never succeed (ignored, cancelled),
    each audited with `why`; returns them."""
    dependents = waiting_dependents(conn, job_ids)
    if not dependents:
        return []
    cancelled = driver(conn).cancel_jobs(
        conn, dependents, actor=actor, reason=why, asked_at=now, now=now
    )
    audit.record_many(
        conn,
        (
            {
                "actor": actor,
                "action": AuditAction.CANCEL,
                "job_id": job_id,
                "reason": why,
                "details": {"dependency_of": list(job_ids)},
            }
            for job_id in cancelled
        ),
        now=now,
    )
    return cancelled


def dependencies_of(conn: sa.Connection, job_id: int) -> list[dict[str, Any]]:
    """The jobs `job_id` waits for (or waited for): id, type, status, resolution (None
    for a pruned one)."""
    rows = conn.execute(
        sa.select(
            job_dependencies.c.depends_on_id.label("id"),
            jobs.c.job_type,
            jobs.c.status,
            jobs.c.resolution,
        )
        .select_from(
            job_dependencies.outerjoin(jobs, jobs.c.id == job_dependencies.c.depends_on_id)
        )
        .where(job_dependencies.c.job_id == job_id)
        .order_by(job_dependencies.c.depends_on_id)
    ).all()
    return [dict(row._mapping) for row in rows]


def dependents_of(conn: sa.Connection, job_id: int, *, limit: int = 100) -> list[dict[str, Any]]:
    """The jobs enqueued `after=` this one: id, type, status (first `limit`)."""
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.job_type, jobs.c.status)
        .join(job_dependencies, job_dependencies.c.job_id == jobs.c.id)
        .where(job_dependencies.c.depends_on_id == job_id)
        .order_by(jobs.c.id)
        .limit(limit)
    ).all()
    return [dict(row._mapping) for row in rows]


def why_waiting(dependencies: Sequence[Mapping[str, Any]]) -> str | None:
    """What a waiting dependent waits for, in words: a dependency that ended dead or
    cancelled first ("waiting for dead job #17"), else how many are still to succeed."""
    for dep in dependencies:
        status = dep["status"]
        if status == JobStatus.DEAD.value and dep["resolution"] is None:
            return (
                f"waiting for dead job #{dep['id']} (retry it to go on; ignoring it cancels this)"
            )
        if status == JobStatus.CANCELLED.value:
            return f"waiting for cancelled job #{dep['id']}: it will not run"
    pending = [
        dep
        for dep in dependencies
        if dep["status"] != JobStatus.SUCCEEDED.value and dep["status"] is not None
    ]
    if not pending:
        return None
    if len(pending) == 1:
        return f"waiting for job #{pending[0]['id']} ({pending[0]['status']}) to succeed"
    return f"waiting for {len(pending)} of {len(dependencies)} jobs to succeed"
