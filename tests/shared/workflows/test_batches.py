"""Batches: children, callbacks released once by the outcome that completes the batch,
`ctx.batch`, triage retries taking a dead child's place, cancel."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue_batch
from jobdesk.shared.core.audit import AuditAction, audit_log
from jobdesk.shared.core.decisions import ignore_dead, requeue_dead
from jobdesk.shared.core.models import jobs
from jobdesk.shared.workflows.batch_cancel import cancel_batch
from jobdesk.shared.workflows.batches import counts_of
from jobdesk.shared.workflows.models import batches
from jobdesk.worker.registry import Registry
from jobdesk.worker.testing import drain
from tests.shared.workflows.conftest import Seen, declare_worker, now, status


def children(n: int, fail: set[int] | frozenset[int] = frozenset()) -> list[NewJob]:
    return [NewJob("wf.child", {"n": i, "fail": i in fail}) for i in range(n)]


def callbacks() -> dict[str, NewJob]:
    return {
        "on_success": NewJob("wf.done", {"kind": "success"}),
        "on_finish": NewJob("wf.done", {"kind": "finish"}),
    }


def test_callbacks_run_once_after_every_child_and_see_the_batch(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(5), **callbacks(), name="nightly 2030-06-01")
        assert status(conn, batch.on_success_job_id or 0) == "waiting"
    assert len(batch.job_ids) == 5
    drain(engine, registry=reg)
    assert seen.kinds().count("child") == 5
    # Both callbacks ran once, after the last child, and saw all five results.
    assert sorted(seen.kinds()[5:]) == ["finish", "success"]
    for _, _, (batch_id, counts, results) in seen.runs[5:]:
        assert batch_id == batch.id
        assert counts == {"succeeded": 5}
        assert results == [{"n": i * 10} for i in range(5)]
    with engine.connect() as conn:
        row = conn.execute(sa.select(batches).where(batches.c.id == batch.id)).one()
    assert (row.total, row.finished, row.succeeded, row.name) == (5, 5, 5, "nightly 2030-06-01")
    assert row.finished_at is not None
    assert drain(engine, registry=reg).count == 0  # nothing released twice


def test_a_dead_child_fires_on_finish_once_and_on_success_only_after_its_retry(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        declare_worker(conn, reg)
        batch = enqueue_batch(conn, children(3, fail={1}), **callbacks())
    drain(engine, registry=reg)
    assert seen.kinds().count("finish") == 1
    assert "success" not in seen.kinds()
    finish = next(run for run in seen.runs if run[0] == "finish")
    assert finish[2][1] == {"succeeded": 2, "dead": 1}
    dead_child = batch.job_ids[1]
    with engine.begin() as conn:
        new = requeue_dead(conn, [dead_child], actor="ana", reason="fixed", now=now()).new_ids
        retry = new[dead_child]
        conn.execute(sa.update(jobs).where(jobs.c.id == retry).values(payload={"n": 1}))
        assert counts_of(conn, batch.id) == {"succeeded": 2, "queued": 1}
    drain(engine, registry=reg)
    assert seen.kinds().count("finish") == 1  # never again
    assert seen.kinds().count("success") == 1
    success = next(run for run in seen.runs if run[0] == "success")
    assert success[2][1] == {"succeeded": 3}


def test_ignoring_a_dead_child_cancels_on_success(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(2, fail={0}), **callbacks())
    drain(engine, registry=reg)
    with engine.begin() as conn:
        ignore_dead(conn, [batch.job_ids[0]], actor="ana", reason="customer left", now=now())
        assert status(conn, batch.on_success_job_id or 0) == "cancelled"
        reasons = (
            conn.execute(
                sa.select(audit_log.c.reason).where(audit_log.c.job_id == batch.on_success_job_id)
            )
            .scalars()
            .all()
        )
    assert reasons == [f"job #{batch.job_ids[0]} it waited for was ignored: customer left"]


def test_an_empty_batch_runs_its_callbacks_at_once(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, [], **callbacks())
    assert batch.job_ids == []
    drain(engine, registry=reg)
    assert sorted(seen.kinds()) == ["finish", "success"]


def test_cancelling_a_batch(engine: sa.Engine, reg: Registry, seen: Seen) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(4), **callbacks())
    drain(engine, registry=reg, max_jobs=1)
    with engine.begin() as conn:
        done = cancel_batch(conn, batch.id, actor="ana", reason="wrong month", now=now())
        assert len(done["cancelled"]) == 4  # three children and on_success
        assert status(conn, batch.on_finish_job_id or 0) == "queued"
        actions = conn.execute(sa.select(audit_log.c.action)).scalars().all()
        assert AuditAction.BATCH_CANCEL.value in actions
        row = conn.execute(sa.select(batches).where(batches.c.id == batch.id)).one()
        assert (row.cancelled_by, row.cancel_reason) == ("ana", "wrong month")
    drain(engine, registry=reg)
    finish = next(run for run in seen.runs if run[0] == "finish")
    assert finish[2][1] == {"succeeded": 1, "cancelled": 3}
    with engine.begin() as conn, pytest.raises(LookupError, match="batch 999 does not exist"):
        cancel_batch(conn, 999, actor="ana", reason="x", now=now())


def test_bad_batches_are_refused_before_anything_is_written(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        with pytest.raises(ValidationError, match=r"jobs\[1\]\.job_type"):
            enqueue_batch(conn, [NewJob("wf.child", {}), NewJob("", {})])
        with pytest.raises(ValidationError, match=r"on_success\.idempotency_key"):
            enqueue_batch(conn, children(1), on_success=NewJob("wf.done", {}, idempotency_key="k"))
        with pytest.raises(ValidationError, match="name"):
            enqueue_batch(conn, children(1), name="x" * 201)
        with pytest.raises(ValidationError, match=r"on_finish\[0\]\.payload"):
            enqueue_batch(conn, children(1), on_finish={"job_type": "wf.done", "payload": 3})
        assert conn.execute(sa.select(sa.func.count()).select_from(batches)).scalar() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 0


def test_retention_prunes_a_batch_once_its_jobs_are_gone(engine: sa.Engine, reg: Registry) -> None:
    from datetime import timedelta

    from jobdesk.shared.retention.pruning import prune_batches_batch

    with engine.begin() as conn:
        gone = enqueue_batch(conn, children(2), **callbacks())
        kept = enqueue_batch(conn, children(1), **callbacks())
    drain(engine, registry=reg)
    later = now() + timedelta(days=1)
    with engine.begin() as conn:
        conn.execute(
            sa.delete(jobs).where(
                jobs.c.id.in_([*gone.job_ids, gone.on_success_job_id, gone.on_finish_job_id])
            )
        )
        assert prune_batches_batch(conn, now() - timedelta(days=1)).deleted == 0  # too young
        assert prune_batches_batch(conn, later).deleted == 1
        left = conn.execute(sa.select(batches.c.id)).scalars().all()
    assert left == [kept.id]


def test_cancelling_one_child_cancels_on_success_but_on_finish_still_runs(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    from jobdesk.shared.core.decisions import cancel

    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(3), **callbacks())
        cancel(conn, [batch.job_ids[2]], actor="ana", reason="not this one", now=now())
        assert status(conn, batch.on_success_job_id or 0) == "cancelled"
    drain(engine, registry=reg)
    assert seen.kinds().count("finish") == 1
    assert "success" not in seen.kinds()
