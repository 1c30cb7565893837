"""`async def` job types for the worker tests (`--jobs tests.worker.jobmods.asyncjobs`).

Each returns or records what the test needs to see: when it started and ended (to count
how many ran at once), which worker ran it, whether it saw its cancellation.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any

from jobdesk import PermanentError, RetryAfter, Snooze, job
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker.context import JobContext

FAST = ExponentialBackoff(base=timedelta(seconds=0.2), cap=timedelta(seconds=0.5))


@job("a.sleep", backoff=FAST, timeout=30)
async def sleep(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Awaits `seconds`; its result says when it ran and where."""
    started = time.time()
    await asyncio.sleep(float(payload.get("seconds", 0)))
    return {"started": started, "ended": time.time(), "pid": os.getpid()}


@job("a.noop")
async def noop(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


@job("a.outcome", backoff=FAST, max_attempts=3)
async def outcome(payload: dict[str, Any], ctx: JobContext) -> Any:
    """Ends the way `payload["how"]` says, after an await."""
    await asyncio.sleep(0)
    how = payload["how"]
    if how == "fail":
        raise ConnectionError(f"refused on attempt {ctx.attempt}")
    if how == "permanent":
        raise PermanentError("account deleted")
    if how == "retry_after":
        raise RetryAfter(60)
    if how == "snooze":
        raise Snooze(60, "destination paused")
    if how == "exit":
        raise SystemExit(2)
    if how == "not_json":
        return {1, 2}
    if how == "progress":
        await ctx.progress_async(3, 10)
        return {"progress": True}
    if how == "once":
        first = await ctx.once_async("a:once:1", _effect)
        second = await ctx.once_async("a:once:1", _effect)
        return {"first": first, "second": second, "done": await ctx.effect_done_async("a:once:1")}
    return {"how": how, "attempt": ctx.attempt}


async def _effect() -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"sent": time.time()}


@job("a.overrun", backoff=FAST, timeout=1, max_attempts=1)
async def overrun(payload: dict[str, Any], ctx: JobContext) -> None:
    """Awaits far past its 1 s timeout: the task is cancelled."""
    await asyncio.sleep(3600)


@job("a.stubborn", backoff=FAST, timeout=1, max_attempts=1)
async def stubborn(payload: dict[str, Any], ctx: JobContext) -> None:
    """Swallows its cancellation and goes on awaiting for `seconds`."""
    until = time.monotonic() + float(payload.get("seconds", 5))
    while time.monotonic() < until:
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            continue


@job("a.blocking", backoff=FAST, timeout=1, max_attempts=1)
async def blocking(payload: dict[str, Any], ctx: JobContext) -> None:
    """A blocking call inside `async def`: the whole event loop stops for `seconds`."""
    time.sleep(float(payload.get("seconds", 5)))


@job("a.cooperative", backoff=FAST, timeout=60)
async def cooperative(payload: dict[str, Any], ctx: JobContext) -> None:
    """Waits for its cancel request, then stops by raising."""
    while not ctx.cancelled.is_set():
        await asyncio.sleep(0.05)
    raise RuntimeError("stopped on request")
