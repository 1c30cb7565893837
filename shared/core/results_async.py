"""`wait_async`: `wait` for asyncio code, on SQLAlchemy's asyncio extension. On
PostgreSQL it is woken like `wait` (LISTEN on an async psycopg connection of its own);
elsewhere it polls, with the event loop free between looks."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.settle_triggers import SETTLED_CHANNEL
from jobdesk.shared.core.notifications import listen_connection_async, listen_url
from jobdesk.shared.core.results import NOTIFIED_RECHECK_SECONDS, JobResult, Waiting, job_result

__all__ = ["wait_async"]


async def wait_async(
    engine: AsyncEngine, job_id: int, *, timeout: float | None = 30.0
) -> JobResult:
    """Await job `job_id` becoming final; its `JobResult`. Like `wait`: `TimeoutError`
    after `timeout` seconds, `LookupError` if there is no such job; the event loop is
    free between looks (each on a connection taken for it and given back)."""
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"wait_async needs an AsyncEngine (create_async_engine), got "
            f"{type(engine).__name__}; with a sync Engine call wait(...)"
        )
    waiting = Waiting(job_id, timeout)
    async with engine.connect() as conn:
        found = await conn.run_sync(job_result, job_id)
    if waiting.after(found) is None:
        return found
    listener = await _settled_listener(engine)
    if listener is None:
        while True:
            await asyncio.sleep(waiting.after(found) or 0.0)
            async with engine.connect() as conn:
                found = await conn.run_sync(job_result, job_id)
            if found.final:
                return found
    async with listener:
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: driver(sync).watch_jobs(sync, [job_id]))
        wanted = str(job_id)
        while True:
            async with engine.connect() as conn:
                found = await conn.run_sync(job_result, job_id)
            if waiting.after(found) is None:
                return found
            async for note in listener.notifies(
                timeout=min(NOTIFIED_RECHECK_SECONDS, waiting.left()), stop_after=1000
            ):
                if note.payload == wanted:
                    break


async def _settled_listener(engine: AsyncEngine) -> psycopg.AsyncConnection[Any] | None:
    """An async connection listening on the settle channel, where the database can
    notify (PostgreSQL, not behind PgBouncer); None: poll."""
    if not driver(engine.sync_engine).listens:
        return None
    url = listen_url(engine.sync_engine, None)
    if url is None:
        return None
    try:
        return await listen_connection_async(
            url, channel=SETTLED_CHANNEL, application_name="jobdesk-wait"
        )
    except psycopg.Error:
        return None  # polling still answers
