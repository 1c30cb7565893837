"""Named rate limits (`smtp:default` 10/s, `webhook:crm` 5/s) as token buckets in the
`rate_limits` table, so every worker process on every host draws from the same bucket.

A bucket holds at most `burst` tokens (default: `rate`, at least 1) and refills at
`rate / per_seconds` tokens a second. `try_acquire_many` takes up to `want` whole tokens
(as many as are there, at least one) and says how many, or takes nothing and returns
how long until a token will be there; `try_acquire` is the one-token case. The worker
snoozes a job that got no token for that long without counting an attempt. Workers do
not come here per job: `jobdesk.shared.limits.allowance` takes tokens in batches and
spends them locally, so this row is written once per batch, not once per delivery.

Atomicity is the driver's (`Driver.take_tokens`): on PostgreSQL one statement locks,
refills and decrements the row (a statement that takes nothing writes nothing); on
SQLite the caller's transaction began with `BEGIN IMMEDIATE`, so a read-modify-write
runs as the only writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import refilled
from jobdesk.shared.core.models import KEY_LENGTH
from jobdesk.shared.limits.models import rate_limits

#: Never tell a caller to come back sooner than this (avoids busy loops on rounding).
MIN_WAIT_SECONDS = 0.001

_rl = rate_limits.c


@dataclass(frozen=True, slots=True)
class Bucket:
    """A limit's shape: capacity and refill rate in tokens per second."""

    capacity: float
    refill_per_second: float

    @classmethod
    def of(cls, rate: float, per_seconds: float, burst: float | None) -> Bucket:
        if not rate > 0 or not per_seconds > 0:
            raise ValueError("rate limit needs rate > 0 and per_seconds > 0")
        capacity = max(1.0, float(rate if burst is None else burst))
        return cls(capacity, rate / per_seconds)

    def level(self, tokens: float, elapsed_seconds: float) -> float:
        return refilled(tokens, elapsed_seconds, self.capacity, self.refill_per_second)

    def wait_for_one(self, tokens: float) -> float:
        return max(MIN_WAIT_SECONDS, (1.0 - tokens) / self.refill_per_second)


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key or len(key) > KEY_LENGTH:
        raise ValueError(f"rate limit key must be 1-{KEY_LENGTH} characters")
    return key


def try_acquire(
    conn: sa.Connection,
    key: str,
    *,
    rate: float,
    per_seconds: float = 1.0,
    burst: float | None = None,
    now: datetime,
) -> float:
    """Take one token from `key`'s bucket: 0.0 when taken, else seconds until one is due."""
    _, wait = try_acquire_many(
        conn, key, 1, rate=rate, per_seconds=per_seconds, burst=burst, now=now
    )
    return wait


def try_acquire_many(
    conn: sa.Connection,
    key: str,
    want: int,
    *,
    rate: float,
    per_seconds: float = 1.0,
    burst: float | None = None,
    now: datetime,
) -> tuple[int, float]:
    """Take up to `want` tokens from `key`'s bucket (all whole tokens there, if fewer).

    Returns `(taken, 0.0)` with `taken >= 1`, or `(0, seconds until one token is due)`.
    """
    if want < 1:
        raise ValueError("want must be >= 1")
    bucket = Bucket.of(rate, per_seconds, burst)
    _check_key(key)
    return _acquire(conn, key, want, bucket, now)


def _acquire(
    conn: sa.Connection, key: str, want: int, bucket: Bucket, now: datetime
) -> tuple[int, float]:
    taken, level = driver(conn).take_tokens(
        conn,
        key,
        want,
        capacity=bucket.capacity,
        refill_per_second=bucket.refill_per_second,
        now=now,
    )
    if taken:
        return taken, 0.0
    return 0, bucket.wait_for_one(level)


def reset_limit(conn: sa.Connection, key: str) -> bool:
    """Forget `key`'s bucket (it starts full again). True when there was one."""
    result = conn.execute(sa.delete(rate_limits).where(_rl.key == _check_key(key)))
    return bool(result.rowcount)
