"""Test job types for the worker acceptance tests (`--jobs tests.worker.jobmods.basic`).

Handlers leave evidence in the `effects` table: `run:<job>:<attempt>` rows with the
wall-clock start/end of each run (all workers run on this host), and `done:<key>` rows
through `ctx.once`, whose uniqueness proves an effect happened once.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk import PermanentError, RetryAfter, Snooze, job
from jobdesk.shared.core.effects import record_effect
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker import executor
from jobdesk.worker.context import JobContext

FAST = ExponentialBackoff(base=timedelta(seconds=0.2), cap=timedelta(seconds=0.5))


def _mark(ctx: JobContext, detail: dict[str, Any]) -> None:
    with ctx.engine.begin() as conn:
        record_effect(conn, f"run:{ctx.job_id}:{ctx.attempt}", job_id=ctx.job_id, detail=detail)


@job("t.effect", backoff=FAST)
def effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return ctx.once(f"done:{payload.get('key', ctx.job_id)}", lambda: {"job": ctx.job_id})


@job("t.sleep", backoff=FAST, timeout=60)
def sleep(payload: dict[str, Any], ctx: JobContext) -> None:
    """Sleeps `seconds` (only on attempt 1 when `first_only`), recording start and end."""
    start = time.time()
    _mark(ctx, {"start": start, "phase": "started"})
    if ctx.attempt == 1 or not payload.get("first_only"):
        time.sleep(float(payload.get("seconds", 0)))
    with ctx.engine.begin() as conn:
        record_effect(
            conn, f"end:{ctx.job_id}:{ctx.attempt}", job_id=ctx.job_id, detail={"end": time.time()}
        )


@job("t.hang", backoff=FAST, timeout=1, max_attempts=2)
def hang(payload: dict[str, Any], ctx: JobContext) -> None:
    """Never returns on its own (ignores ctx.cancelled), like a stuck socket read."""
    _mark(ctx, {"start": time.time()})
    time.sleep(3600)


@job("t.flaky", backoff=FAST, max_attempts=5)
def flaky(payload: dict[str, Any], ctx: JobContext) -> str:
    if ctx.attempt <= int(payload.get("fail_times", 1)):
        raise ConnectionError(f"flaky failure on attempt {ctx.attempt}")
    return "ok"


@job("t.permanent", backoff=FAST)
def permanent(payload: dict[str, Any], ctx: JobContext) -> None:
    raise PermanentError("account deleted")


@job("t.retry_after", backoff=FAST)
def retry_after(payload: dict[str, Any], ctx: JobContext) -> None:
    raise RetryAfter(float(payload.get("seconds", 60)))


@job("t.snooze", backoff=FAST)
def snooze(payload: dict[str, Any], ctx: JobContext) -> None:
    raise Snooze(float(payload.get("seconds", 60)), "destination paused")


@job("t.grouped", backoff=FAST)
def grouped(payload: dict[str, Any], ctx: JobContext) -> None:
    start = time.time()
    time.sleep(random.uniform(0, float(payload.get("max_sleep", 0.02))))
    _mark(ctx, {"start": start, "end": time.time(), "group": payload["group"]})


# The worker's own rate-limit acquire, timed: the bucket accounts a token at a moment
# between the call and its return, so a run's handler start (which a busy host can delay
# by a scheduler tick or a GIL hand-over) is not when its token was taken.
_token_taken = threading.local()
_acquire = executor.acquire


def _timed_acquire(*args: Any, **kwargs: Any) -> float:
    asked = time.time()
    wait = _acquire(*args, **kwargs)
    _token_taken.between = (asked, time.time())
    return wait


executor.acquire = _timed_acquire


@job("t.limited", backoff=FAST, rate_limit="20/s")
def limited(payload: dict[str, Any], ctx: JobContext) -> None:
    asked, granted = _token_taken.between
    time.sleep(float(payload.get("seconds", 0)))
    _mark(ctx, {"at": time.time(), "asked": asked, "granted": granted, "pid": os.getpid()})


@job("t.db_hold", backoff=FAST)
def db_hold(payload: dict[str, Any], ctx: JobContext) -> None:
    """Holds a handler-pool connection while it sleeps (pool exhaustion, D4)."""
    with ctx.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
        time.sleep(float(payload.get("seconds", 0.3)))
        conn.rollback()
    _mark(ctx, {"at": time.time()})


@job("t.hog", backoff=FAST, timeout=1)
def hog(payload: dict[str, Any], ctx: JobContext) -> int:
    """Holds the GIL: one C-level loop that never lets another thread run (its 1 s
    timeout cannot fire, since the timeout check is Python code too)."""
    _mark(ctx, {"phase": "started"})
    return sum(range(int(payload.get("n", 10**13))))


@job("t.cooperative", backoff=FAST, timeout=60)
def cooperative(payload: dict[str, Any], ctx: JobContext) -> None:
    """Works in small steps and stops as soon as `ctx.cancelled` is set."""
    _mark(ctx, {"start": time.time()})
    for step in range(int(payload.get("steps", 600))):
        if ctx.cancelled.wait(0.1):
            raise RuntimeError(f"stopped at step {step}: cancelled")
    with ctx.engine.begin() as conn:
        record_effect(conn, f"end:{ctx.job_id}:{ctx.attempt}", job_id=ctx.job_id, detail={})
