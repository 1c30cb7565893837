"""Workflow units of a chaos run: batches with callbacks and `after=` chains, under the
same faults as every other job.

A unit (profile `workflows`: one per that many plain jobs) is a batch of `CHILDREN`
`chaos.once_db` children with `on_success` and `on_finish` callbacks of the same type
(their effect keys end `-success` / `-finish`), and a chain A -> B -> C of `chaos.once_db`
steps. The checker's per-job classes cover each of them (lost, stuck, doubled, completed
twice); `check_units` adds what only a workflow can get wrong: a callback released
twice or before its batch's last child ended, a batch whose counters disagree with its
children, a chain step that started before its predecessor finished, a job left
`waiting`.

A unit is enqueued in one transaction named by its key (the batch's name), so a retry
after an ambiguous commit finds the batch and does not enqueue the unit twice.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_batch
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.workflows.models import batches
from tests.chaos.checker import Planned, Verdict
from tests.chaos.tables import MAX_ATTEMPTS

#: What `check_units` reports; each one a failure.
WORKFLOW_CLASSES = (
    "batch counters wrong",
    "callback twice",
    "callback early",
    "chain out of order",
    "stuck waiting",
)
CHILDREN = 5
CHAIN = 3
STEP_TYPE = "chaos.once_db"


@dataclass(frozen=True)
class Unit:
    key: str
    batch_id: int
    children: tuple[int, ...]
    on_success: int
    on_finish: int
    chain: tuple[int, ...]

    def planned(self) -> list[Planned]:
        """Every job of the unit, for the per-job checks (effect keys = payload keys)."""
        keyed = [(f"{self.key}-c{i}", job_id) for i, job_id in enumerate(self.children)]
        keyed += [(f"{self.key}-success", self.on_success), (f"{self.key}-finish", self.on_finish)]
        keyed += [(f"{self.key}-s{i}", job_id) for i, job_id in enumerate(self.chain)]
        return [Planned(key, job_id, STEP_TYPE, False) for key, job_id in keyed]


def _step(key: str, ms: int) -> NewJob:
    return NewJob(STEP_TYPE, {"key": key, "ms": ms, "die": False}, max_attempts=MAX_ATTEMPTS)


def enqueue_unit(engine: sa.Engine, key: str, ms: int) -> Unit:
    """Enqueue one unit (or find the one an earlier, ambiguous attempt committed)."""
    with engine.begin() as conn:
        found = _existing(conn, key)
        if found is not None:
            return found
        batch = enqueue_batch(
            conn,
            [_step(f"{key}-c{i}", ms) for i in range(CHILDREN)],
            on_success=_step(f"{key}-success", ms),
            on_finish=_step(f"{key}-finish", ms),
            name=key,
        )
        chain: list[int] = []
        for i in range(CHAIN):
            spec = _step(f"{key}-s{i}", ms)
            chain.append(
                enqueue(
                    conn,
                    spec.job_type,
                    spec.payload,
                    max_attempts=spec.max_attempts,
                    after=chain[-1:] or None,
                )
            )
    assert batch.on_success_job_id is not None
    assert batch.on_finish_job_id is not None
    return Unit(
        key,
        batch.id,
        tuple(batch.job_ids),
        batch.on_success_job_id,
        batch.on_finish_job_id,
        tuple(chain),
    )


def _existing(conn: sa.Connection, key: str) -> Unit | None:
    row = conn.execute(sa.select(batches).where(batches.c.name == key)).first()
    if row is None:
        return None
    children = conn.execute(
        sa.select(jobs.c.id).where(jobs.c.batch_id == row.id).order_by(jobs.c.id)
    ).scalars()
    steps = conn.execute(
        sa.select(jobs.c.id, jobs.c.payload).where(
            jobs.c.job_type == STEP_TYPE, jobs.c.id > row.on_finish_job_id
        )
    ).all()
    chain = sorted(
        job_id for job_id, payload in steps if str(payload.get("key", "")).startswith(f"{key}-s")
    )
    return Unit(key, row.id, tuple(children), row.on_success_job_id, row.on_finish_job_id,
                tuple(chain))  # fmt: skip


def check_units(engine: sa.Engine, units: list[Unit], verdict: Verdict) -> None:
    """The workflow classes (see the module); each a failure when it happens."""
    if not units:
        return
    with engine.connect() as conn:
        rows = {
            row.id: row
            for row in conn.execute(
                sa.select(jobs.c.id, jobs.c.status, jobs.c.started_at, jobs.c.finished_at)
            )
        }
        successes = dict(
            conn.execute(
                sa.select(job_attempts.c.job_id, sa.func.count())
                .where(job_attempts.c.outcome == "succeeded")
                .group_by(job_attempts.c.job_id)
            ).all()
        )
        counters = {row.id: row for row in conn.execute(sa.select(batches))}
    for unit in units:
        where = f"unit {unit.key} (batch {unit.batch_id})"
        batch = counters.get(unit.batch_id)
        children = [rows[i] for i in unit.children if i in rows]
        if batch is None or (batch.total, batch.finished, batch.succeeded) != (
            CHILDREN,
            CHILDREN,
            CHILDREN,
        ):
            counts = None if batch is None else (batch.total, batch.finished, batch.succeeded)
            verdict.bad("batch counters wrong", f"{where}: {counts}")
        last_child = max((c.finished_at for c in children if c.finished_at), default=None)
        for callback in (unit.on_success, unit.on_finish):
            row = rows.get(callback)
            if row is None:
                continue  # the per-job checks report it lost
            if successes.get(callback, 0) > 1:
                verdict.bad("callback twice", f"{where}: job {callback}")
            if (
                last_child is not None
                and row.started_at is not None
                and (row.started_at < last_child)
            ):
                verdict.bad("callback early", f"{where}: job {callback} before the last child")
        steps = [rows.get(i) for i in unit.chain]
        for before, after in itertools.pairwise(steps):
            if before is None or after is None or after.started_at is None:
                continue
            if before.finished_at is None or after.started_at < before.finished_at:
                verdict.bad("chain out of order", f"{where}: job {after.id}")
        for job_id in (*unit.children, unit.on_success, unit.on_finish, *unit.chain):
            row = rows.get(job_id)
            if row is not None and row.status == "waiting":
                verdict.bad("stuck waiting", f"{where}: job {job_id}")
