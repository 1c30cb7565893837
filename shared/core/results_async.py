"""`wait_async`: `wait` for asyncio code, on SQLAlchemy's asyncio extension."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy.ext.asyncio import AsyncEngine

from jobdesk.shared.core.results import (
    FIRST_POLL_SECONDS,
    JobResult,
    check_timeout,
    job_result,
    next_poll,
)

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
    limit = check_timeout(timeout)
    deadline = time.monotonic() + limit
    delay = FIRST_POLL_SECONDS
    while True:
        async with engine.connect() as conn:
            found = await conn.run_sync(job_result, job_id)
        if found.final:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"job {job_id} is still {found.status.value} after {limit:g}s of waiting"
            )
        await asyncio.sleep(min(delay, left))
        delay = next_poll(delay)
