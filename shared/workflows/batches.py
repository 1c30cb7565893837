"""Batches: `enqueue_batch` puts N jobs in together with what runs when they are done.

`enqueue_batch(conn, jobs, on_success=, on_finish=, name=)` writes, in the caller's
transaction: the batch row, its callbacks as `waiting` jobs (so their ids exist from the
start and each can be released only once — a compare-and-set on `waiting`), and the
children in one statement per dialect (as `enqueue_many`) carrying the batch's id. The
settle triggers (`settle`) count each child's outcome and release `on_finish` when every
child is final, `on_success` when every child succeeded — in the transaction of the
outcome that completes the batch.

A child whose idempotency key is taken is not enqueued again and is not in the batch
(its holder's id is returned at its position, as `enqueue_many` does); `total` counts the
children this call created. A batch without children releases its callbacks at once.

A triage retry of a dead child takes its place (`hand_over`): the batch counts it as
not finished again, so `on_success` can still fire when the retry succeeds; an
`on_finish` that fired never fires again. A retried callback hands the batch over too.
Cancelling a batch: `batch_cancel`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.driver.base import Placement
from jobdesk.shared.core.enqueue import (
    Bind,
    NewJob,
    Prepared,
    connection_of,
    insert_placed,
    insert_prepared,
    prepare,
)
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus, Resolution
from jobdesk.shared.workflows.models import BATCH_NAME_LENGTH, batches

__all__ = ["Batch", "BatchView", "ChildResult", "enqueue_batch"]

#: Children read per page by `BatchView.results`.
RESULTS_PAGE = 500


@dataclass(frozen=True, slots=True)
class Batch:
    """What `enqueue_batch` made: the batch's id and its children's ids in input order."""

    id: int
    job_ids: list[int]
    on_success_job_id: int | None = None
    on_finish_job_id: int | None = None


@dataclass(frozen=True, slots=True)
class ChildResult:
    """One child of a batch: its id, status, result (when it succeeded) and last error."""

    id: int
    status: str
    result: Any
    error: str | None


@dataclass(slots=True)
class BatchView:
    """A batch as a handler sees it (`ctx.batch`): `id`, `name`, `total` and `counts`
    (children by status name, a retried dead child counted by its retry only), and its
    children's results page by page."""

    id: int
    name: str | None
    total: int
    counts: dict[str, int]
    _read: Any = field(default=None, repr=False, compare=False)

    def results(self, *, after_id: int = 0, limit: int = RESULTS_PAGE) -> list[ChildResult]:
        """Up to `limit` children with ids above `after_id`, in id order: pass the last
        id seen to read the next page; an empty list is the end."""
        return list(self._read(after_id, limit))

    def all_results(self) -> Iterable[ChildResult]:
        """Every child, one page at a time."""
        after_id = 0
        while page := self.results(after_id=after_id):
            yield from page
            after_id = page[-1].id


def enqueue_batch(
    bind: Bind,
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    on_success: NewJob | Mapping[str, Any] | None = None,
    on_finish: NewJob | Mapping[str, Any] | None = None,
    name: str | None = None,
    max_payload_bytes: int | None = None,
) -> Batch:
    """Enqueue `new_jobs` as one batch in the caller's transaction (see the module).

    `on_success` runs once every child succeeded; `on_finish` once every child is
    final (succeeded, dead or cancelled); each sees `ctx.batch`. Everything is
    validated before anything is written (errors name `jobs[3].payload`,
    `on_success.job_type`)."""
    conn = connection_of(bind)
    name = _check_name(name)
    children = prepare(conn, new_jobs, max_payload_bytes=max_payload_bytes)
    for index, window in sorted(children.windows.items()):
        raise ValidationError(
            f"jobs[{index}].{window.kind}", "a batch's children are enqueued together: no window"
        )
    callbacks = {
        label: _prepare_callback(conn, label, spec, max_payload_bytes)
        for label, spec in (("on_success", on_success), ("on_finish", on_finish))
        if spec is not None
    }
    batch_id = conn.execute(
        sa.insert(batches).values(name=name, total=0).returning(batches.c.id)
    ).scalar_one()
    ids = insert_prepared(conn, children, batch_id=batch_id)
    total = _count_children(conn, batch_id)
    # An empty batch is complete at once: its callbacks go in queued.
    placement = Placement(waiting=total > 0)
    callback_ids = {
        label: insert_placed(conn, prepared, placement)[0] for label, prepared in callbacks.items()
    }
    conn.execute(
        sa.update(batches)
        .where(batches.c.id == batch_id)
        .values(
            total=total,
            on_success_job_id=callback_ids.get("on_success"),
            on_finish_job_id=callback_ids.get("on_finish"),
            finished_at=None if total else db_now(conn),
        )
    )
    return Batch(batch_id, ids, callback_ids.get("on_success"), callback_ids.get("on_finish"))


def _check_name(name: object) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("name", "must be a non-empty string or None")
    if len(name) > BATCH_NAME_LENGTH:
        raise ValidationError("name", f"at most {BATCH_NAME_LENGTH} characters")
    return name


def _prepare_callback(
    conn: sa.Connection, label: str, spec: NewJob | Mapping[str, Any], limit: int | None
) -> Prepared:
    prepared = prepare(conn, [spec], max_payload_bytes=limit, label=label)
    if prepared.rows[0].idempotency_key is not None:
        raise ValidationError(
            f"{label}.idempotency_key", "a batch's callback runs once by itself: no key"
        )
    if prepared.after:
        raise ValidationError(f"{label}.after", "a batch's callback waits for its batch only")
    if prepared.windows:
        raise ValidationError(f"{label}.{prepared.windows[0].kind}", "a callback runs once")
    return prepared


def _count_children(conn: sa.Connection, batch_id: int) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count()).select_from(jobs).where(jobs.c.batch_id == batch_id)
        ).scalar_one()
    )


# --- reading ---------------------------------------------------------------------------


def counts_of(conn: sa.Connection, batch_id: int) -> dict[str, int]:
    """The batch's children by status; a dead child that a retry replaced is left out
    (its retry counts in its place)."""
    rows = conn.execute(
        sa.select(jobs.c.status, sa.func.count())
        .where(jobs.c.batch_id == batch_id, _in_place())
        .group_by(jobs.c.status)
    ).all()
    return {str(status): int(n) for status, n in rows}


def _in_place() -> sa.ColumnElement[bool]:
    """Children that still stand for their slot: not a dead one a retry replaced."""
    replaced = sa.and_(
        jobs.c.status == JobStatus.DEAD.value,
        sa.func.coalesce(jobs.c.resolution, "").in_(
            [Resolution.REQUEUED.value, Resolution.FIXED.value]
        ),
    )
    return sa.not_(replaced)


def child_results(
    conn: sa.Connection, batch_id: int, *, after_id: int = 0, limit: int = RESULTS_PAGE
) -> list[ChildResult]:
    """A page of the batch's children (see `BatchView.results`)."""
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.status, jobs.c.result, jobs.c.last_error)
        .where(jobs.c.batch_id == batch_id, jobs.c.id > after_id, _in_place())
        .order_by(jobs.c.id)
        .limit(max(1, min(int(limit), 10_000)))
    ).all()
    return [ChildResult(row.id, row.status, row.result, row.last_error) for row in rows]


def batch_of(conn: sa.Connection, job_id: int) -> int | None:
    """The batch a job belongs to: as a child, or as one of its callbacks."""
    found = conn.execute(
        sa.select(jobs.c.batch_id).where(jobs.c.id == job_id, jobs.c.batch_id.is_not(None))
    ).scalar()
    if found is not None:
        return int(found)
    found = conn.execute(
        sa.select(batches.c.id).where(
            sa.or_(batches.c.on_success_job_id == job_id, batches.c.on_finish_job_id == job_id)
        )
    ).scalar()
    return None if found is None else int(found)


def view(conn: sa.Connection, batch_id: int, read: Any) -> BatchView | None:
    """The batch as `ctx.batch` shows it; `read(after_id, limit)` pages its children."""
    row = conn.execute(
        sa.select(batches.c.name, batches.c.total).where(batches.c.id == batch_id)
    ).first()
    if row is None:
        return None
    return BatchView(batch_id, row.name, int(row.total), counts_of(conn, batch_id), read)


# --- triage and cancel ---------------------------------------------------------------


def hand_over(conn: sa.Connection, retried: Mapping[int, int]) -> None:
    """Triage retried dead jobs (old id -> new id): a retried child takes its slot (the
    batch counts it unfinished again), a retried callback is the batch's callback now."""
    if not retried:
        return
    old_ids = list(retried)
    children = conn.execute(
        sa.select(jobs.c.batch_id, sa.func.count())
        .where(jobs.c.id.in_(old_ids), jobs.c.batch_id.is_not(None))
        .group_by(jobs.c.batch_id)
        .order_by(jobs.c.batch_id)
    ).all()
    for batch_id, n in children:
        conn.execute(
            sa.update(batches)
            .where(batches.c.id == batch_id)
            .values(finished=batches.c.finished - n, finished_at=None)
        )
    for column in (batches.c.on_success_job_id, batches.c.on_finish_job_id):
        for old, new in retried.items():
            conn.execute(sa.update(batches).where(column == old).values({column.key: new}))


def waiting_success_callbacks(conn: sa.Connection, child_ids: Sequence[int]) -> list[int]:
    """The `on_success` callbacks still waiting in the batches of these children (an
    ignored dead child means its batch will never all succeed)."""
    if not child_ids:
        return []
    batch_ids = sa.select(jobs.c.batch_id).where(
        jobs.c.id.in_(list(child_ids)), jobs.c.batch_id.is_not(None)
    )
    return list(
        conn.execute(
            sa.select(jobs.c.id)
            .join(batches, batches.c.on_success_job_id == jobs.c.id)
            .where(batches.c.id.in_(batch_ids), jobs.c.status == JobStatus.WAITING.value)
            .order_by(jobs.c.id)
        ).scalars()
    )


def children_by_status(conn: sa.Connection, batch_id: int, statuses: Sequence[str]) -> list[int]:
    """The ids of the batch's children in these statuses (in place), in id order."""
    return list(
        conn.execute(
            sa.select(jobs.c.id)
            .where(jobs.c.batch_id == batch_id, jobs.c.status.in_(list(statuses)), _in_place())
            .order_by(jobs.c.id)
        ).scalars()
    )
