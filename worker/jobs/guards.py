"""Safety valves shared by the email and webhook handlers, kept cheap per job.

- `pass_guards`: the destination's rate limit and circuit breaker, checked in the
  caller's transaction; raises `Snooze` (the attempt is not counted) when the job must
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
from jobdesk.shared.limits import breakers
from jobdesk.shared.limits import rate_limits as ratelimits
from jobdesk.worker.jobs.config import JobsConfig
from jobdesk.worker.registry import RateLimit


class DbTime:
    def __init__(self, now: datetime) -> None:
        self._anchor = now
        self._mono = time.monotonic()

    def __call__(self) -> datetime:
        return self._anchor + timedelta(seconds=time.monotonic() - self._mono)


def pass_guards(conn: sa.Connection, *, breaker_key: str, limit: RateLimit, now: datetime) -> bool:
    """Take a rate-limit token and pass the breaker, or raise `Snooze`."""
    wait = ratelimits.try_acquire(
        conn, limit.key, rate=limit.rate, per_seconds=limit.per_seconds, now=now
    )
    if wait > 0:
        raise Snooze(wait, f"rate limit {limit.key} reached")
    view = breakers.breaker_state(conn, breaker_key, now)
    if view.state == breakers.CLOSED:
        return view.consecutive_failures == 0
    allowed, wait = breakers.allow_attempt(conn, breaker_key, now)
    if not allowed:
        raise Snooze(wait, f"circuit breaker {breaker_key} is open")
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
