"""`enqueue_async` / `enqueue_many_async` behave like the sync functions on every async
driver — options, validation (nothing written), idempotency within one transaction —
and a bind of the wrong kind is refused with the function to call instead."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_scoped_session,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session

from jobdesk import (
    NewJob,
    ValidationError,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)
from jobdesk.shared.core.models import jobs
from tests.asyncdb import async_url, backend_fixture, driver_fixture, run_then_dispose  # noqa: F401


@pytest.fixture
def async_engine(db_url: str, driver: str) -> AsyncEngine:
    return create_async_engine(async_url(db_url, driver))


def rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs).order_by(jobs.c.id)))


def test_options_and_order_as_the_sync_functions(
    async_engine: AsyncEngine, engine: sa.Engine
) -> None:
    async def scenario() -> tuple[int, list[int]]:
        async with async_engine.begin() as conn:
            one = await enqueue_async(
                conn,
                "t.any",
                {"n": 0},
                queue="q1",
                priority=2,
                max_attempts=3,
                group_key="g",
                timeout=7.5,
                idempotency_key="k",
            )
            many = await enqueue_many_async(
                conn,
                (NewJob("t.any", {"n": n}) for n in (1, 2)),  # a generator is fine
            )
            again = await enqueue_many_async(
                conn, [{"job_type": "t.x", "payload": {}, "idempotency_key": "k"}]
            )
        return one, [*many, *again]

    one, more = run_then_dispose(async_engine, scenario)
    assert more[2] == one  # the key taken earlier in the same transaction
    found = rows(engine)
    assert [row.id for row in found] == [one, *more[:2]]
    first = found[0]
    assert (first.queue, first.priority, first.max_attempts, first.group_key) == ("q1", 2, 3, "g")
    assert first.timeout_seconds == 7.5
    assert [row.payload for row in found[1:]] == [{"n": 1}, {"n": 2}]


def test_a_bad_job_refuses_the_batch_and_writes_nothing(
    async_engine: AsyncEngine, engine: sa.Engine
) -> None:
    async def scenario() -> None:
        async with AsyncSession(async_engine) as session, session.begin():
            await enqueue_many_async(
                session, [NewJob("t.ok", {}), NewJob("Bad Type!", {}), NewJob("t.ok", {})]
            )

    with pytest.raises(ValidationError, match=r"jobs\[1\]\.job_type"):
        run_then_dispose(async_engine, scenario)
    assert rows(engine) == []


def test_a_rollback_takes_the_job_with_it(async_engine: AsyncEngine, engine: sa.Engine) -> None:
    async def scenario() -> int:
        async with AsyncSession(async_engine) as session:
            async with session.begin():
                job_id = await enqueue_async(session, "t.any", {})
                await session.rollback()
            return job_id

    run_then_dispose(async_engine, scenario)
    assert rows(engine) == []


def test_the_wrong_bind_names_the_function_to_call(
    async_engine: AsyncEngine, engine: sa.Engine
) -> None:
    async def scenario() -> None:
        with pytest.raises(TypeError, match=r"async with engine\.begin\(\)"):
            await enqueue_async(async_engine, "t.any", {})  # type: ignore[arg-type]
        async with AsyncSession(async_engine) as session:
            with pytest.raises(TypeError, match=r"await enqueue_async\(session"):
                enqueue(session, "t.any", {})  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"await enqueue_async\(session"):
                enqueue_many(session, [])  # type: ignore[arg-type]
        with (
            Session(engine) as sync_session,
            pytest.raises(TypeError, match=r"call `enqueue_many\(\.\.\.\)` \(no await\)"),
        ):
            await enqueue_many_async(sync_session, [])  # type: ignore[arg-type]

    run_then_dispose(async_engine, scenario)
    assert rows(engine) == []


def test_an_async_scoped_session_joins_its_scopes_transaction(
    async_engine: AsyncEngine, engine: sa.Engine
) -> None:
    async def scenario() -> int:
        scoped = async_scoped_session(
            async_sessionmaker(async_engine), scopefunc=asyncio.current_task
        )
        async with scoped.begin():
            job_id = await enqueue_async(scoped, "t.any", {"scoped": True})
        await scoped.remove()
        return job_id

    job_id = run_then_dispose(async_engine, scenario)
    assert [(row.id, row.payload) for row in rows(engine)] == [(job_id, {"scoped": True})]


def test_a_sync_app_does_not_load_the_asyncio_extension() -> None:
    probe = (
        "import sys; from jobdesk import enqueue, enqueue_many, NewJob; "
        "print('sqlalchemy.ext.asyncio' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "False"
