"""`after=`: a job runs once every listed job succeeded; a dead dependency holds it and
says why; a retry hands the dependency over; ignoring or cancelling cancels dependents."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many, wait, wait_async
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.decisions import cancel, ignore_dead, requeue_dead
from jobdesk.shared.core.models import jobs
from jobdesk.shared.workflows.dependencies import dependencies_of, why_waiting
from jobdesk.worker.registry import Registry
from jobdesk.worker.testing import drain
from tests.asyncdb import async_url
from tests.shared.workflows.conftest import Seen, declare_worker, now, status


def drain_later(
    engine: sa.Engine, reg: Registry, job_id: int, delay: float = 2.5
) -> threading.Thread:
    """Run the job `delay` seconds from now, in another thread (drained until it is final:
    on a loaded machine a first drain may find it not quite due yet)."""

    def work() -> None:
        time.sleep(delay)
        while True:
            drain(engine, registry=reg)
            with engine.connect() as conn:
                if status(conn, job_id) in ("succeeded", "dead", "cancelled"):
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def step(name: str, *, fail: bool = False, after: list[int] | None = None) -> NewJob:
    return NewJob("wf.step", {"name": name, "fail": fail}, after=after)


def test_a_chain_runs_in_order(engine: sa.Engine, reg: Registry, seen: Seen) -> None:
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a"})
        b = enqueue(conn, "wf.step", {"name": "b"}, after=[a])
        c = enqueue(conn, "wf.step", {"name": "c"}, after=[b])
        assert [status(conn, j) for j in (a, b, c)] == ["queued", "waiting", "waiting"]
        assert why_waiting(dependencies_of(conn, c)) == f"waiting for job #{b} (waiting) to succeed"
    drain(engine, registry=reg)
    assert [what for _, _, what in seen.runs] == ["a", "b", "c"]


def test_a_job_after_several_waits_for_all_of_them(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        first, second = enqueue_many(conn, [step("x"), step("y")])
        join = enqueue_many(conn, [step("join", after=[first, second])])[0]
        assert why_waiting(dependencies_of(conn, join)) == "waiting for 2 of 2 jobs to succeed"
    drain(engine, registry=reg, max_jobs=1)
    with engine.connect() as conn:
        assert status(conn, join) == "waiting"
        assert conn.execute(sa.select(jobs.c.waiting_for).where(jobs.c.id == join)).scalar() == 1
    drain(engine, registry=reg)
    assert [what for _, _, what in seen.runs] == ["x", "y", "join"]


def test_after_a_job_that_already_succeeded_runs_at_once(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a"})
    drain(engine, registry=reg)
    with engine.begin() as conn:
        b = enqueue(conn, "wf.step", {"name": "b"}, after=[a])
        assert status(conn, b) == "queued"
        assert [d["id"] for d in dependencies_of(conn, b)] == [a]


def test_a_dead_dependency_holds_and_its_retry_lets_it_go_on(
    engine: sa.Engine, reg: Registry, seen: Seen
) -> None:
    with engine.begin() as conn:
        declare_worker(conn, reg)
        a = enqueue(conn, "wf.step", {"name": "a", "fail": True})
        b = enqueue(conn, "wf.step", {"name": "b"}, after=[a])
    drain(engine, registry=reg)
    with engine.begin() as conn:
        assert status(conn, b) == "waiting"
        assert why_waiting(dependencies_of(conn, b)) == (
            f"waiting for dead job #{a} (retry it to go on; ignoring it cancels this)"
        )
        retry = requeue_dead(conn, [a], actor="ana", reason="fixed", now=now()).new_ids[a]
        conn.execute(sa.update(jobs).where(jobs.c.id == retry).values(payload={"name": "a2"}))
        assert [d["id"] for d in dependencies_of(conn, b)] == [retry]
    drain(engine, registry=reg)
    assert [what for _, _, what in seen.runs] == ["a2", "b"]


def test_ignoring_or_cancelling_a_dependency_cancels_the_chain_after_it(
    engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a", "fail": True})
        b = enqueue(conn, "wf.step", {"name": "b"}, after=[a])
        c = enqueue(conn, "wf.step", {"name": "c"}, after=[b])
        x = enqueue(conn, "wf.step", {"name": "x"}, run_at=now() + timedelta(days=30))
        y = enqueue(conn, "wf.step", {"name": "y"}, after=[x])
    drain(engine, registry=reg)
    with engine.begin() as conn:
        ignore_dead(conn, [a], actor="ana", reason="duplicate signup", now=now())
        cancel(conn, [x], actor="bob", reason="not needed", now=now())
        assert [status(conn, j) for j in (b, c, y)] == ["cancelled"] * 3
        reasons = dict(
            conn.execute(
                sa.select(audit_log.c.job_id, audit_log.c.reason).where(
                    audit_log.c.job_id.in_([b, c, y])
                )
            ).all()
        )
    assert reasons[b] == f"job #{a} it waited for was ignored: duplicate signup"
    assert reasons[y] == f"job #{x} it waited for was cancelled: not needed"


def test_bad_dependencies_are_refused(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a"})
        with pytest.raises(ValidationError, match="after: job 999 does not exist"):
            enqueue(conn, "wf.step", {"name": "b"}, after=[a, 999])
        with pytest.raises(ValidationError, match="after: job ids are positive integers"):
            enqueue(conn, "wf.step", {"name": "b"}, after=["1"])  # type: ignore[list-item]
        with pytest.raises(ValidationError, match="after: must be a list of job ids"):
            enqueue(conn, "wf.step", {"name": "b"}, after=7)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=r"jobs\[0\]\.after"):
            enqueue_many(conn, [step("b", after=[True])])  # type: ignore[list-item]


def test_wait_is_woken_when_the_job_ends(engine: sa.Engine, reg: Registry) -> None:
    """PostgreSQL: the settle trigger's NOTIFY wakes `wait` (it looks at the row only when
    told, not every second); SQLite: it polls. Either way it returns the result."""
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a"})
    reads: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def count(*args: object) -> None:
        statement = str(args[2])
        if statement.lstrip().upper().startswith("SELECT") and "jobdesk_jobs" in statement:
            reads.append(statement)

    drainer = drain_later(engine, reg, a)
    started = time.monotonic()
    found = wait(engine, a, timeout=30)
    drainer.join(30)  # its connections back in the pool before the engine goes
    assert found.result == "a"
    assert time.monotonic() - started < 10
    if engine.dialect.name == "postgresql":
        assert len(reads) <= 6, reads  # polling would have looked 5+ times by 2.5 s


def test_wait_async_is_woken_when_the_job_ends(
    engine: sa.Engine, db_url: str, reg: Registry
) -> None:
    """`wait_async` on PostgreSQL (asyncpg engine, psycopg listener) is woken the same way."""
    driver_name = "aiosqlite" if db_url.startswith("sqlite") else "asyncpg"
    async_engine = create_async_engine(async_url(db_url, driver_name))
    with engine.begin() as conn:
        a = enqueue(conn, "wf.step", {"name": "a"})
    reads: list[str] = []

    @sa.event.listens_for(async_engine.sync_engine, "before_cursor_execute")
    def count(*args: object) -> None:
        statement = str(args[2])
        if statement.lstrip().upper().startswith("SELECT") and "jobdesk_jobs" in statement:
            reads.append(statement)

    drainer = drain_later(engine, reg, a)

    async def scenario() -> Any:
        try:
            return await wait_async(async_engine, a, timeout=30)
        finally:
            await async_engine.dispose()

    found = anyio.run(scenario)
    drainer.join(30)  # its connections back in the pool before the engine goes
    assert found.result == "a"
    if engine.dialect.name == "postgresql":
        assert len(reads) <= 6, reads
