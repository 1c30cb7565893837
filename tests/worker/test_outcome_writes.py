"""`ctx.with_outcome`: a handler's write goes in with its attempt's outcome — in the same
transaction as the job's new state — or, when something else settled the attempt first,
on its own; a context made by hand writes at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.effects import find_effect, record_effect
from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.settings import Settings
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Kind, execute, make_attempt
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain


def _writer(key: str, job_id: int) -> Any:
    def write(conn: sa.Connection) -> None:
        record_effect(conn, key, job_id=job_id, detail={"by": "with_outcome"})

    return write


def _effect(engine: sa.Engine, key: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        return find_effect(conn, key)


@pytest.mark.parametrize("raises", [False, True], ids=["succeeded", "failed"])
def test_the_write_goes_in_with_the_outcome_whatever_it_is(engine: sa.Engine, raises: bool) -> None:
    reg = Registry()
    seen: list[dict[str, Any] | None] = []

    @job("t.writes", target=reg, max_attempts=1)
    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.with_outcome(_writer("k:with-outcome", ctx.job_id))
        seen.append(_effect(engine, "k:with-outcome"))  # not written yet
        if raises:
            raise RuntimeError("after the effect")

    with engine.begin() as conn:
        job_id = enqueue(conn, "t.writes", {})
    result = drain(engine, registry=reg)
    assert result.count == 1
    assert seen == [None]
    assert _effect(engine, "k:with-outcome") == {"by": "with_outcome"}
    with engine.connect() as conn:
        status = conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar_one()
    assert status == ("dead" if raises else "succeeded")


@pytest.mark.postgresql_only
def test_the_write_commits_in_the_transaction_of_the_jobs_new_state(engine: sa.Engine) -> None:
    reg = Registry()

    @job("t.writes", target=reg)
    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.with_outcome(_writer("k:same-transaction", ctx.job_id))

    with engine.begin() as conn:
        job_id = enqueue(conn, "t.writes", {})
    drain(engine, registry=reg)
    with engine.connect() as conn:
        job_xmin = conn.execute(
            sa.select(sa.literal_column("xmin::text", sa.Text))
            .select_from(jobs)
            .where(jobs.c.id == job_id)
        ).scalar_one()
        effect_xmin = conn.execute(
            sa.select(sa.literal_column("xmin::text", sa.Text))
            .select_from(effects)
            .where(effects.c.key == "k:same-transaction")
        ).scalar_one()
    assert job_xmin == effect_xmin


def test_a_write_whose_attempt_was_settled_first_is_made_on_its_own(engine: sa.Engine) -> None:
    reg = Registry()
    fenced = threading.Event()

    @job("t.writes", target=reg)
    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.with_outcome(_writer("k:late", ctx.job_id))
        fenced.wait(10)

    with engine.begin() as conn:
        job_id = enqueue(conn, "t.writes", {})
        [claimed] = claim(conn, worker_id="w", limit=1)
    job_type = reg.get("t.writes")
    assert job_type is not None
    attempt = make_attempt(claimed, job_type, engine, Settings())
    attempt.begin()
    finished: list[tuple[Kind, int, bool]] = []

    def run() -> None:
        outcome = execute(claimed, job_type, attempt.ctx, clock=lambda: claimed.started_at)
        finished.append((outcome.kind, len(outcome.writes), attempt.finish(outcome)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert attempt.fence()  # the lease was lost while the handler ran
    fenced.set()
    thread.join(10)
    assert finished == [(Kind.SUCCEEDED, 1, False)]
    assert attempt.outcome is not None
    assert attempt.outcome.kind is Kind.FENCED
    assert _effect(engine, "k:late") == {"by": "with_outcome"}
    assert job_id == claimed.id


def test_a_context_made_by_hand_writes_at_once(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "t.writes", {})
    ctx = JobContext(
        job_id=job_id,
        job_type="t.writes",
        attempt=1,
        max_attempts=5,
        idempotency_key=None,
        engine=engine,
        settings=Settings(),
    )
    ctx.with_outcome(_writer("k:by-hand", job_id))
    assert _effect(engine, "k:by-hand") == {"by": "with_outcome"}
