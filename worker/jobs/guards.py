"""Safety valves shared by the email and webhook handlers, kept cheap per job.

- `pass_guards`: the destination's rate limit (a token from this process's allowance,
  see `jobdesk.shared.limits.allowance`) and circuit breaker (its state as the caller
  read it along with its other lookups; only a breaker that is not closed costs a
  transaction here); raises `Snooze` (the attempt is not counted) when the job must
  wait. Returns whether the breaker was fully healthy, so the common success path can
  skip writing "success" to a breaker that has nothing to reset.
- `record_health`: a transient failure counts against the breaker; a success closes it.
- `DbTime`: the database time sampled once per job and advanced by the monotonic clock,
  instead of a `SELECT now()` round trip before every write.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.errors import Snooze
from jobdesk.shared.limits import allowance, breakers
from jobdesk.worker.jobs.config import JobsConfig
from jobdesk.worker.registry import RateLimit


class DbTime:
    def __init__(self, now: datetime) -> None:
        self._anchor = now
        self._mono = time.monotonic()

    def __call__(self) -> datetime:
        return self._anchor + timedelta(seconds=time.monotonic() - self._mono)


def pass_guards(
    engine: sa.Engine, *, breaker: breakers.BreakerView, limit: RateLimit, now: datetime
) -> bool:
    """Spend a rate-limit token and pass the breaker, or raise `Snooze`.

    Call it outside any transaction: a refill of the allowance and a half-open probe
    each open one of their own.
    """
    wait = allowance.acquire(
        engine,
        limit.key,
        rate=limit.rate,
        per_seconds=limit.per_seconds,
        burst=limit.burst,
        now=now,
    )
    if wait > 0:
        raise Snooze(wait, f"rate limit {limit.key} reached")
    if breaker.state == breakers.CLOSED:
        return breaker.consecutive_failures == 0
    with engine.begin() as conn:
        allowed, wait = breakers.allow_attempt(conn, breaker.key, now)
    if not allowed:
        raise Snooze(wait, f"circuit breaker {breaker.key} is open")
    return False


def record_health(
    conn: sa.Connection,
    key: str,
    now: datetime,
    cfg: JobsConfig,
    *,
    error: str | None,
    was_healthy: bool,
) -> None:
    if error is not None:
        breakers.record_failure(
            conn,
            key,
            now,
            error,
            threshold=cfg.breaker_threshold,
            cooldown=timedelta(seconds=cfg.breaker_cooldown_seconds),
        )
    elif not was_healthy:
        breakers.record_success(conn, key, now)
