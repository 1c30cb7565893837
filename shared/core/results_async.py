"""`wait_async`: `wait` for asyncio code, on SQLAlchemy's asyncio extension."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from jobdesk.shared.core.results import JobResult, Waiting, job_result

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
    while True:
        async with engine.connect() as conn:
            found = await conn.run_sync(job_result, job_id)
        delay = waiting.after(found)
        if delay is None:
            return found
        await asyncio.sleep(delay)
