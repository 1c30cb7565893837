"""Named rate limits (`smtp:default` 10/s, `webhook:crm` 5/s) as token buckets in the
`rate_limits` table, so every worker process on every host draws from the same bucket.

A bucket holds at most `burst` tokens (default: `rate`, at least 1) and refills at
`rate / per_seconds` tokens a second. `try_acquire` takes one token and returns 0.0, or
takes nothing and returns how long until a token will be there; the worker then
snoozes the job for that long without counting an attempt.

Atomicity: on PostgreSQL one upsert reads, refills and decrements the row under its
row lock; on SQLite the caller's transaction began with `BEGIN IMMEDIATE`, so the
read-modify-write below runs as the only writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.models import KEY_LENGTH
from jobdesk.shared.core.sqltypes import UTCDateTime
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
        return min(self.capacity, tokens + max(0.0, elapsed_seconds) * self.refill_per_second)

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
    bucket = Bucket.of(rate, per_seconds, burst)
    _check_key(key)
    if is_postgresql(conn):
        return _acquire_postgresql(conn, key, bucket, now)
    return _acquire_sqlite(conn, key, bucket, now)


_PG_ACQUIRE = sa.text(
    """
    INSERT INTO jobdesk_rate_limits AS b (key, tokens, updated_at)
    VALUES (:key, :capacity - 1, :now)
    ON CONFLICT (key) DO UPDATE
       SET tokens = LEAST(:capacity, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM
                      (CAST(:now AS timestamptz) - b.updated_at))) * :refill) - 1,
           updated_at = GREATEST(b.updated_at, CAST(:now AS timestamptz))
     WHERE LEAST(:capacity, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM
                      (CAST(:now AS timestamptz) - b.updated_at))) * :refill) >= 1
    RETURNING tokens
    """
)


def _acquire_postgresql(conn: sa.Connection, key: str, bucket: Bucket, now: datetime) -> float:
    params = {
        "key": key,
        "capacity": bucket.capacity,
        "refill": bucket.refill_per_second,
    }
    statement = _PG_ACQUIRE.bindparams(sa.bindparam("now", now, type_=UTCDateTime()))
    if conn.execute(statement, params).first() is not None:
        return 0.0
    # Empty bucket: nothing was written; read the level to say how long to wait.
    row = conn.execute(sa.select(_rl.tokens, _rl.updated_at).where(_rl.key == key)).first()
    if row is None:
        return MIN_WAIT_SECONDS
    level = bucket.level(row.tokens, (now - row.updated_at).total_seconds())
    return bucket.wait_for_one(level)


def _acquire_sqlite(conn: sa.Connection, key: str, bucket: Bucket, now: datetime) -> float:
    row = conn.execute(sa.select(_rl.tokens, _rl.updated_at).where(_rl.key == key)).first()
    if row is None:
        conn.execute(
            sa.insert(rate_limits).values(key=key, tokens=bucket.capacity - 1, updated_at=now)
        )
        return 0.0
    level = bucket.level(row.tokens, (now - row.updated_at).total_seconds())
    if level < 1.0:
        return bucket.wait_for_one(level)
    conn.execute(
        sa.update(rate_limits)
        .where(_rl.key == key)
        .values(tokens=level - 1.0, updated_at=max(now, row.updated_at))
    )
    return 0.0


def reset_limit(conn: sa.Connection, key: str) -> bool:
    """Forget `key`'s bucket (it starts full again). True when there was one."""
    result = conn.execute(sa.delete(rate_limits).where(_rl.key == _check_key(key)))
    return bool(result.rowcount)
