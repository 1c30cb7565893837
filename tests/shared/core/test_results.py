"""`job_result`, `wait` and `wait_async`: what became of a job, from the app's side."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from jobdesk import JobResult, PermanentError, enqueue, job_result, wait, wait_async
from jobdesk.shared.core.states import JobStatus
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.asyncdb import async_url


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @job("res.ok", target=reg)
    def ok(payload: dict[str, Any], ctx: JobContext) -> Any:
        return payload["give"]

    @job("res.bad", target=reg, max_attempts=1)
    def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        raise PermanentError("account deleted")

    return reg


def add(engine: sa.Engine, job_type: str, payload: dict[str, Any]) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload)


def test_job_result_before_and_after(engine: sa.Engine, reg: Registry) -> None:
    good = add(engine, "res.ok", {"give": {"crm_id": 7}})
    plain = add(engine, "res.ok", {"give": "a string"})
    bad = add(engine, "res.bad", {})
    with engine.connect() as conn:
        assert job_result(conn, good) == JobResult(JobStatus.QUEUED, None, None)
        assert not job_result(conn, good).final
    drain(engine, registry=reg)
    with engine.connect() as conn:
        assert job_result(conn, good) == JobResult(JobStatus.SUCCEEDED, {"crm_id": 7}, None)
        assert job_result(conn, plain).result == "a string"
        failed = job_result(conn, bad)
    assert (failed.status, failed.result, failed.final) == (JobStatus.DEAD, None, True)
    assert "PermanentError: account deleted" in (failed.error or "")


def test_a_job_that_is_not_there_or_not_an_id(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        with pytest.raises(LookupError, match="job 999 does not exist"):
            job_result(conn, 999)
        with pytest.raises(TypeError, match="job_id must be an int, got str"):
            job_result(conn, "7")  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="job 999"):
        wait(engine, 999, timeout=1)


def test_wait_returns_once_a_worker_finished_it(engine: sa.Engine, reg: Registry) -> None:
    job_id = add(engine, "res.ok", {"give": [1, 2]})
    runner = threading.Timer(0.3, lambda: drain(engine, registry=reg))
    runner.start()
    try:
        found = wait(engine, job_id, timeout=20)
    finally:
        runner.join()
    assert found == JobResult(JobStatus.SUCCEEDED, [1, 2], None)


def test_wait_gives_up_after_its_timeout(engine: sa.Engine) -> None:
    job_id = add(engine, "res.ok", {"give": 1})
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"job {job_id} is still queued after 0.3s"):
        wait(engine, job_id, timeout=0.3)
    assert time.monotonic() - began < 5
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(ValueError, match="timeout must"):
            wait(engine, job_id, timeout=bad)  # type: ignore[arg-type]


def test_wait_async(engine: sa.Engine, db_url: str, reg: Registry) -> None:
    driver = "aiosqlite" if db_url.startswith("sqlite") else "asyncpg"
    async_engine = create_async_engine(async_url(db_url, driver))
    done = add(engine, "res.ok", {"give": {"ok": True}})
    waiting = add(engine, "res.ok", {"give": 0})
    drain(engine, registry=reg, max_jobs=1)

    async def scenario() -> JobResult:
        try:
            with pytest.raises(TimeoutError, match=f"job {waiting} is still queued"):
                await wait_async(async_engine, waiting, timeout=0.2)
            with pytest.raises(TypeError, match=r"with a sync Engine call wait\(\.\.\.\)"):
                await wait_async(engine, done)  # type: ignore[arg-type]
            return await wait_async(async_engine, done, timeout=5)
        finally:
            await async_engine.dispose()

    assert anyio.run(scenario) == JobResult(JobStatus.SUCCEEDED, {"ok": True}, None)
