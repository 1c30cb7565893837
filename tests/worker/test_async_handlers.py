"""`async def` handlers: registered by `@job` like plain ones, and every way they end is
the same outcome as for a plain handler (run here by `drain`, which awaits them on an
event loop of its own under the same timeout). What the worker process does with many
of them at once is in `test_async_worker.py`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.models import jobs
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Kind
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.worker.jobmods import asyncjobs
from tests.worker.procs import job as job_row


def test_async_def_registers_as_a_coroutine_handler() -> None:
    reg = Registry()

    @job("ah.x", target=reg)
    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    @job("ah.y", target=reg)
    def plain(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    class Callable:
        async def __call__(self, payload: dict[str, Any], ctx: JobContext) -> None:
            pass

    job("ah.z", target=reg)(Callable())
    job("ah.p", target=reg)(functools.partial(handler))
    kinds = {name: reg.get(name).is_async for name in reg.names()}  # type: ignore[union-attr]
    assert kinds == {"ah.p": True, "ah.x": True, "ah.y": False, "ah.z": True}
    assert reg.names_by_kind() == (["ah.y"], ["ah.p", "ah.x", "ah.z"])


def test_what_the_worker_cannot_run_is_refused_at_import() -> None:
    reg = Registry()

    async def agen(payload: dict[str, Any], ctx: JobContext) -> AsyncIterator[int]:
        yield 1

    def gen(payload: dict[str, Any], ctx: JobContext) -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match=r"'ah\.agen': the handler is an async generator function"):
        job("ah.agen", target=reg)(agen)
    with pytest.raises(TypeError, match=r"'ah\.gen': the handler is a generator function"):
        job("ah.gen", target=reg)(gen)
    with pytest.raises(TypeError, match=r"'ah\.cls': the handler is the class Registry"):
        job("ah.cls", target=reg)(Registry)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'ah\.none': the handler must be callable"):
        job("ah.none", target=reg)(None)  # type: ignore[arg-type]
    assert len(reg) == 0


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    job("ah.ends", target=reg, max_attempts=3)(asyncjobs.outcome)

    @job("ah.overrun", target=reg, timeout=0.5, max_attempts=1)
    async def overrun(payload: dict[str, Any], ctx: JobContext) -> None:
        await asyncio.sleep(3600)

    async def wrapped(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    @job("ah.hidden", target=reg)
    def hides_a_coroutine(payload: dict[str, Any], ctx: JobContext) -> Any:
        return wrapped(payload, ctx)  # a plain wrapper: nothing would run

    @job("ah.ledger", target=reg)
    async def ledger(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        sent: list[int] = []

        async def send() -> dict[str, Any]:
            sent.append(1)
            return {"n": len(sent)}

        first = await ctx.once_async(f"ah:{ctx.job_id}", send)
        again = await ctx.once_async(f"ah:{ctx.job_id}", send)
        in_db = await ctx.once_async(f"ahb:{ctx.job_id}", lambda conn: {"conn": conn is not None})
        await ctx.progress_async(1, 2)
        return {
            "first": first,
            "again": again,
            "sent": len(sent),
            "in_db": in_db,
            "done": await ctx.effect_done_async(f"ah:{ctx.job_id}"),
        }

    return reg


@pytest.mark.parametrize(
    ("how", "kind", "status", "error"),
    [
        ("ok", Kind.SUCCEEDED, "succeeded", None),
        ("fail", Kind.FAILED, "failed", "ConnectionError: refused on attempt 1"),
        ("permanent", Kind.PERMANENT, "dead", "PermanentError: account deleted"),
        ("retry_after", Kind.RETRY_AFTER, "failed", "RetryAfter"),
        ("snooze", Kind.SNOOZED, "queued", "destination paused"),
        ("exit", Kind.FAILED, "failed", "SystemExit"),
        ("not_json", Kind.PERMANENT, "dead", "ResultNotStorable"),
    ],
)
def test_every_ending_is_the_outcome_a_plain_handler_gets(
    engine: sa.Engine, reg: Registry, how: str, kind: Kind, status: str, error: str | None
) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "ah.ends", {"how": how})
    result = drain(engine, registry=reg, max_jobs=1)
    (ran,) = result.jobs
    assert (ran.id, ran.kind, ran.status) == (job_id, kind, status)
    if error is None:
        assert job_row(engine, job_id).result == {"how": "ok", "attempt": 1}
    else:
        assert error in (ran.error or "")


def test_an_overrun_is_a_timeout_and_its_task_is_cancelled(
    engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "ah.overrun", {})
    (ran,) = drain(engine, registry=reg).jobs
    assert (ran.id, ran.kind, ran.status) == (job_id, Kind.TIMEOUT, "dead")
    assert "ran longer than its 0.5s timeout" in (ran.error or "")


def test_a_coroutine_hidden_by_a_plain_wrapper_is_named_not_stored(
    engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        enqueue(conn, "ah.hidden", {})
    (ran,) = drain(engine, registry=reg).jobs
    assert (ran.kind, ran.status) == (Kind.PERMANENT, "dead")
    assert "HandlerNotAwaited" in (ran.error or "")
    assert "register the `async def` itself" in (ran.error or "")


def test_ctx_database_work_from_a_coroutine(engine: sa.Engine, reg: Registry) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "ah.ledger", {})
    (ran,) = drain(engine, registry=reg).jobs
    assert ran.kind is Kind.SUCCEEDED, ran.error
    row = job_row(engine, job_id)
    assert row.result == {
        "first": {"n": 1},
        "again": {"n": 1},
        "sent": 1,
        "in_db": {"conn": True},
        "done": {"n": 1},
    }
    with engine.connect() as conn:
        progress = conn.execute(sa.select(jobs.c.progress).where(jobs.c.id == job_id)).scalar()
    assert progress == {"done": 1, "total": 2}
