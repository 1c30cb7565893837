"""Named rate limits (`smtp:default` 10/s, `webhook:crm` 5/s) as token buckets in the
`rate_limits` table, so every worker process on every host draws from the same bucket.

A bucket holds at most `burst` tokens (default: `rate`, at least 1) and refills at
`rate / per_seconds` tokens a second. `try_acquire_many` takes up to `want` whole tokens
(as many as are there, at least one) and says how many, or takes nothing and returns
how long until a token will be there; `try_acquire` is the one-token case. The worker
snoozes a job that got no token for that long without counting an attempt. Workers do
not come here per job: `jobdesk.shared.limits.allowance` takes tokens in batches and
spends them locally, so this row is written once per batch, not once per delivery.

Atomicity: on PostgreSQL one statement locks, refills and decrements the row (a
statement that takes nothing writes nothing); on SQLite the caller's transaction began
with `BEGIN IMMEDIATE`, so the read-modify-write below runs as the only writer.
"""

from __future__ import annotations

import math
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
    if is_postgresql(conn):
        return _acquire_postgresql(conn, key, want, bucket, now)
    return _acquire_sqlite(conn, key, want, bucket, now)


# The row is locked first (FOR UPDATE in the CTE) so the level it computes is the
# newest one, and the UPDATE writes only when at least one whole token is there. The
# refilled level and the number taken are returned because RETURNING sees only the new
# row, from which the number taken cannot be told apart from a fractional remainder.
_PG_TAKE = sa.text(
    """
    WITH current AS (
        SELECT key, LEAST(:capacity, tokens + GREATEST(0, EXTRACT(EPOCH FROM
                   (CAST(:now AS timestamptz) - updated_at))) * :refill) AS level
          FROM jobdesk_rate_limits
         WHERE key = :key
           FOR UPDATE
    ), take AS (
        SELECT key, level, LEAST(:want, FLOOR(level)) AS n FROM current
    )
    UPDATE jobdesk_rate_limits AS b
       SET tokens = take.level - take.n,
           updated_at = GREATEST(b.updated_at, CAST(:now AS timestamptz))
      FROM take
     WHERE b.key = take.key AND take.n >= 1
    RETURNING take.n
    """
)
# A bucket seen for the first time starts full; a concurrent first taker makes this a
# no-op, and the caller then takes from the row that one created.
_PG_CREATE = sa.text(
    """
    INSERT INTO jobdesk_rate_limits (key, tokens, updated_at)
    VALUES (:key, :capacity - :n, :now)
    ON CONFLICT (key) DO NOTHING
    RETURNING tokens
    """
)


def _first_take(bucket: Bucket, want: int) -> int:
    return min(want, math.floor(bucket.capacity))


def _acquire_postgresql(
    conn: sa.Connection, key: str, want: int, bucket: Bucket, now: datetime
) -> tuple[int, float]:
    now_param = sa.bindparam("now", now, type_=UTCDateTime())
    params = {
        "key": key,
        "want": want,
        "capacity": bucket.capacity,
        "refill": bucket.refill_per_second,
    }
    take = _PG_TAKE.bindparams(now_param)
    taken = conn.execute(take, params).scalar()
    if taken is not None:
        return int(taken), 0.0
    first = _first_take(bucket, want)
    created = _PG_CREATE.bindparams(now_param)
    if conn.execute(created, {**params, "n": first}).first() is not None:
        return first, 0.0
    taken = conn.execute(take, params).scalar()  # someone else created it meanwhile
    if taken is not None:
        return int(taken), 0.0
    # Empty bucket: nothing was written; read the level to say how long to wait.
    row = conn.execute(sa.select(_rl.tokens, _rl.updated_at).where(_rl.key == key)).first()
    if row is None:
        return 0, MIN_WAIT_SECONDS
    level = bucket.level(row.tokens, (now - row.updated_at).total_seconds())
    return 0, bucket.wait_for_one(level)


def _acquire_sqlite(
    conn: sa.Connection, key: str, want: int, bucket: Bucket, now: datetime
) -> tuple[int, float]:
    row = conn.execute(sa.select(_rl.tokens, _rl.updated_at).where(_rl.key == key)).first()
    if row is None:
        first = _first_take(bucket, want)
        conn.execute(
            sa.insert(rate_limits).values(key=key, tokens=bucket.capacity - first, updated_at=now)
        )
        return first, 0.0
    level = bucket.level(row.tokens, (now - row.updated_at).total_seconds())
    if level < 1.0:
        return 0, bucket.wait_for_one(level)
    taken = min(want, math.floor(level))
    conn.execute(
        sa.update(rate_limits)
        .where(_rl.key == key)
        .values(tokens=level - taken, updated_at=max(now, row.updated_at))
    )
    return taken, 0.0


def reset_limit(conn: sa.Connection, key: str) -> bool:
    """Forget `key`'s bucket (it starts full again). True when there was one."""
    result = conn.execute(sa.delete(rate_limits).where(_rl.key == _check_key(key)))
    return bool(result.rowcount)
