"""What the dashboard and the CLI read about batches and dependencies.

Lists use the batch row's counters (no count over the children per row); a batch's own
page counts its children by status through `ix_jobdesk_jobs_batch_id`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.flow.concurrency import KeySlots, key_slots
from jobdesk.shared.flow.holds import HoldRecord, holds_by_id
from jobdesk.shared.workflows.batches import batch_of, counts_of
from jobdesk.shared.workflows.dependencies import dependencies_of, dependents_of, why_waiting
from jobdesk.shared.workflows.models import batches, job_dependencies

#: Batches per page of the list.
PAGE = 50
#: Children per page of a batch's page.
CHILDREN_PAGE = 100
#: Jobs drawn at most in a batch's dependency graph.
GRAPH_LIMIT = 200


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One batch as lists show it (from its counters)."""

    id: int
    name: str | None
    created_at: datetime
    finished_at: datetime | None
    total: int
    finished: int
    succeeded: int
    on_success_job_id: int | None
    on_finish_job_id: int | None
    cancelled_at: datetime | None
    cancelled_by: str | None
    cancel_reason: str | None

    @property
    def unfinished(self) -> int:
        return max(0, self.total - self.finished)

    @property
    def not_succeeded(self) -> int:
        """Children final but not succeeded (dead or cancelled)."""
        return max(0, self.finished - self.succeeded)

    @property
    def state(self) -> str:
        """`running`, `succeeded`, `finished` (all final, not all succeeded), `cancelled`
        (asked; children may still be ending)."""
        if self.cancelled_at is not None:
            return "cancelled"
        if self.finished < self.total:
            return "running"
        return "succeeded" if self.succeeded >= self.total else "finished"


@dataclass(frozen=True, slots=True)
class Callback:
    """A batch's callback job: which one, its id, type and status."""

    kind: str
    id: int
    job_type: str | None
    status: str | None


@dataclass(frozen=True, slots=True)
class BatchDetail:
    batch: BatchRow
    counts: dict[str, int]
    callbacks: list[Callback]


def _row(row: Any) -> BatchRow:
    return BatchRow(**{name: getattr(row, name) for name in BatchRow.__dataclass_fields__})


_COLUMNS = [batches.c[name] for name in BatchRow.__dataclass_fields__]


def list_batches(
    conn: sa.Connection, *, before_id: int | None = None, limit: int = PAGE
) -> list[BatchRow]:
    """Newest batches first; `before_id` pages on (keyset)."""
    query = sa.select(*_COLUMNS).order_by(batches.c.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(batches.c.id < before_id)
    return [_row(row) for row in conn.execute(query)]


def get_batch(conn: sa.Connection, batch_id: int) -> BatchDetail | None:
    """A batch with its exact child counts and its callbacks; None when unknown."""
    row = conn.execute(sa.select(*_COLUMNS).where(batches.c.id == batch_id)).first()
    if row is None:
        return None
    batch = _row(row)
    wanted = {
        kind: job_id
        for kind, job_id in (
            ("on_success", batch.on_success_job_id),
            ("on_finish", batch.on_finish_job_id),
        )
        if job_id is not None
    }
    found = {
        r.id: r
        for r in conn.execute(
            sa.select(jobs.c.id, jobs.c.job_type, jobs.c.status).where(
                jobs.c.id.in_(list(wanted.values()))
            )
        )
    }
    callbacks = [
        Callback(
            kind,
            job_id,
            found[job_id].job_type if job_id in found else None,
            found[job_id].status if job_id in found else None,
        )
        for kind, job_id in wanted.items()
    ]
    return BatchDetail(batch, counts_of(conn, batch_id), callbacks)


def batch_children(
    conn: sa.Connection,
    batch_id: int,
    *,
    status: str | None = None,
    after_id: int = 0,
    limit: int = CHILDREN_PAGE,
) -> list[dict[str, Any]]:
    """A page of the batch's children (every one, retried dead ones too), in id order."""
    query = (
        sa.select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.status,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.finished_at,
            jobs.c.last_error,
            jobs.c.resolution,
        )
        .where(jobs.c.batch_id == batch_id, jobs.c.id > after_id)
        .order_by(jobs.c.id)
        .limit(limit)
    )
    if status is not None:
        query = query.where(jobs.c.status == status)
    return [dict(row._mapping) for row in conn.execute(query)]


def dependency_graph(conn: sa.Connection, job_ids: Sequence[int]) -> dict[str, Any]:
    """The `after=` edges among and into `job_ids` (at most `GRAPH_LIMIT` jobs): nodes
    {id, job_type, status} and edges (dependency id, dependent id)."""
    ids = list(job_ids)[:GRAPH_LIMIT]
    if not ids:
        return {"nodes": [], "edges": []}
    edges = [
        (int(dep), int(job))
        for job, dep in conn.execute(
            sa.select(job_dependencies.c.job_id, job_dependencies.c.depends_on_id).where(
                job_dependencies.c.job_id.in_(ids)
            )
        )
    ]
    involved = sorted({*ids, *(dep for dep, _ in edges)})
    nodes = [
        dict(row._mapping)
        for row in conn.execute(
            sa.select(jobs.c.id, jobs.c.job_type, jobs.c.status)
            .where(jobs.c.id.in_(involved))
            .order_by(jobs.c.id)
        )
    ]
    return {"nodes": nodes, "edges": sorted(edges)}


def graph_members(conn: sa.Connection, batch_id: int, *, limit: int = GRAPH_LIMIT) -> list[int]:
    """The batch's children that were enqueued `after=` other jobs, in id order, at most
    `limit`: the dependents a batch's graph draws (ask for one more than it draws to
    know whether it is capped). Children without a dependency are edges of no chain."""
    has_dependency = sa.exists().where(job_dependencies.c.job_id == jobs.c.id)
    return list(
        conn.execute(
            sa.select(jobs.c.id)
            .where(jobs.c.batch_id == batch_id, has_dependency)
            .order_by(jobs.c.id)
            .limit(limit)
        ).scalars()
    )


def undecided_dead(conn: sa.Connection, batch_id: int) -> int:
    """How many of the batch's children are dead and still need a decision (what its
    "retry all dead children" would retry)."""
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(
                jobs.c.batch_id == batch_id,
                jobs.c.status == JobStatus.DEAD.value,
                jobs.c.resolution.is_(None),
            )
        ).scalar_one()
    )


@dataclass(frozen=True, slots=True)
class JobWorkflow:
    """A job's place in workflows, for its page: its batch (as child or callback), what
    it waits for, what waits for it, and in words why it is waiting (None if it is not)."""

    batch: BatchRow | None
    callback_of: str | None
    dependencies: list[dict[str, Any]]
    dependents: list[dict[str, Any]]
    waiting_reason: str | None
    #: Its dependencies met, it waits for a slot of this concurrency key (its slots).
    slots: KeySlots | None = None
    #: The quarantine holding it (`jobdesk.shared.flow.holds`).
    hold: HoldRecord | None = None


def job_workflow(conn: sa.Connection, job_id: int, status: str) -> JobWorkflow:
    batch_id = batch_of(conn, job_id)
    batch = None
    callback_of = None
    if batch_id is not None:
        row = conn.execute(sa.select(*_COLUMNS).where(batches.c.id == batch_id)).first()
        batch = None if row is None else _row(row)
        if batch is not None and job_id == batch.on_success_job_id:
            callback_of = "on_success"
        elif batch is not None and job_id == batch.on_finish_job_id:
            callback_of = "on_finish"
    deps = dependencies_of(conn, job_id)
    reason = None
    if status == JobStatus.WAITING.value:
        hold = _hold_of(conn, job_id)
        if hold is not None:
            reason = f"held: {hold.sentence()}"
            if hold.until is not None:
                reason += f" (until {hold.until:%Y-%m-%d %H:%M} UTC)"
            return JobWorkflow(
                batch, callback_of, deps, dependents_of(conn, job_id), reason, hold=hold
            )
        slot_key = _slot_key(conn, job_id)
        if slot_key is not None:
            slots = key_slots(conn, slot_key)
            reason = f"waiting for a slot: {slots.sentence()}"
            return JobWorkflow(batch, callback_of, deps, dependents_of(conn, job_id), reason, slots)
        if callback_of is not None and batch is not None:
            reason = _callback_reason(conn, batch, callback_of)
        else:
            reason = why_waiting(deps)
    return JobWorkflow(batch, callback_of, deps, dependents_of(conn, job_id), reason)


def _hold_of(conn: sa.Connection, job_id: int) -> HoldRecord | None:
    """The hold a `waiting` job is held by (None: it waits for something else)."""
    hold_id = conn.execute(
        sa.select(jobs.c.held_by).where(
            jobs.c.id == job_id, jobs.c.status == JobStatus.WAITING.value
        )
    ).scalar()
    return None if hold_id is None else holds_by_id(conn, [hold_id]).get(hold_id)


def _slot_key(conn: sa.Connection, job_id: int) -> str | None:
    """The concurrency key a `waiting` job waits for a slot of (None: it waits for
    something else)."""
    return conn.execute(
        sa.select(jobs.c.concurrency_key).where(
            jobs.c.id == job_id,
            jobs.c.waiting_for == 0,
            jobs.c.status == JobStatus.WAITING.value,
        )
    ).scalar()


def _callback_reason(conn: sa.Connection, batch: BatchRow, kind: str) -> str:
    if kind == "on_finish":
        return f"waiting for {batch.unfinished} of {batch.total} children of batch #{batch.id}"
    dead = conn.execute(
        sa.select(jobs.c.id)
        .where(
            jobs.c.batch_id == batch.id,
            jobs.c.status == JobStatus.DEAD.value,
            jobs.c.resolution.is_(None),
        )
        .order_by(jobs.c.id)
        .limit(1)
    ).scalar()
    if dead is not None:
        return f"waiting for dead job #{dead} of batch #{batch.id} (retry it to go on)"
    missing = batch.total - batch.succeeded
    return f"waiting for {missing} of {batch.total} children of batch #{batch.id} to succeed"
