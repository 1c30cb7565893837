"""A process's local allowance of rate-limit tokens, taken from the shared bucket in batches.

Taking one token per job from the shared `rate_limits` row made that row the hottest in
the database: every delivery to an endpoint locked it and held the lock through its
commit, so deliveries queued behind one another's fsync. Here a process takes a *batch*
of tokens in one statement (`try_acquire_many`) and spends them from memory; the row is
written once per batch, and an empty bucket is remembered until its next token is due,
so rate-limited jobs do not hammer the row either.

The limit stays shared: every token spent was first taken from the shared bucket, which
never hands out more than `burst + rate * w` tokens in any window of `w` seconds. What
batching adds is that a token may be spent a little after it was taken. A process holds
at most one batch (it refills only when its allowance is empty), so

    jobs started in any window of w seconds  <=  burst + rate * w + P * B

where P is the number of processes (engines) drawing on the key and B the batch size:
`rate_per_second * BATCH_SECONDS`, at most `MAX_BATCH` and at most the burst, at least 1.
At 20/s (the webhook default) B is 1 and the bound is exactly the bucket's; at 1000/s
B is 50, i.e. each process may run 50 ms of the rate ahead. Tokens not spent within
`MAX_HOLD_SECONDS` of their batch are dropped (never given back, never saved up).

State is per engine (one worker process has one), so tests and apps with several
engines or databases never share an allowance. All times are the caller's database time.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.limits.rate_limits import Bucket, try_acquire_many

#: A batch is this many seconds of the limit's rate (the bound above grows with it).
BATCH_SECONDS = 0.05
#: ... and never more tokens than this, however high the rate.
MAX_BATCH = 50
#: Unspent tokens of a batch expire this long after it was taken.
MAX_HOLD_SECONDS = 1.0


def batch_size(bucket: Bucket) -> int:
    """How many tokens one refill asks for: B in the bound above."""
    by_rate = math.floor(bucket.refill_per_second * BATCH_SECONDS)
    return max(1, min(MAX_BATCH, by_rate, math.floor(bucket.capacity)))


@dataclass(frozen=True, slots=True)
class _Shape:
    rate: float
    per_seconds: float
    burst: float | None


class LocalAllowance:
    """The tokens one process holds for one key, refilled from the shared bucket."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._lock = threading.Lock()
        self._tokens = 0
        self._taken_at: datetime | None = None
        self._empty_until: datetime | None = None
        self._shape: _Shape | None = None

    @property
    def held(self) -> int:
        """Tokens in hand (for tests and metrics)."""
        return self._tokens

    def acquire(
        self,
        engine: sa.Engine,
        *,
        rate: float,
        per_seconds: float = 1.0,
        burst: float | None = None,
        now: datetime,
    ) -> float:
        """Spend one token: 0.0 when spent, else seconds until the bucket has one again.

        Only an empty allowance opens a transaction of its own (on `engine`); callers
        must not hold a write transaction on SQLite while calling this.
        """
        bucket = Bucket.of(rate, per_seconds, burst)
        shape = _Shape(rate, per_seconds, burst)
        # One thread refills while the others wait for its answer, rather than every
        # slot queueing on the shared row at once.
        with self._lock:
            if shape != self._shape:  # the limit was reconfigured: start over
                self._shape, self._tokens, self._empty_until = shape, 0, None
            if self._tokens and not self._expired(now):
                self._tokens -= 1
                return 0.0
            self._tokens = 0
            known = self._known_wait(now)
            if known is not None:
                return known
            with engine.begin() as conn:
                taken, wait = try_acquire_many(
                    conn,
                    self.key,
                    batch_size(bucket),
                    rate=rate,
                    per_seconds=per_seconds,
                    burst=burst,
                    now=now,
                )
            self._taken_at = now
            if not taken:
                hold = min(wait, MAX_HOLD_SECONDS)
                self._empty_until = now + timedelta(seconds=hold)
                return wait
            self._empty_until = None
            self._tokens = taken - 1
            return 0.0

    def _known_wait(self, now: datetime) -> float | None:
        """The wait the bucket gave last time, while it still holds (no round trip)."""
        until, asked = self._empty_until, self._taken_at
        if until is None or asked is None or not asked <= now < until:
            return None
        return (until - now).total_seconds()

    def _expired(self, now: datetime) -> bool:
        taken_at = self._taken_at
        if taken_at is None or now < taken_at:  # a clock that went back: ask the bucket
            return True
        return (now - taken_at).total_seconds() >= MAX_HOLD_SECONDS


_allowances: weakref.WeakKeyDictionary[sa.Engine, dict[str, LocalAllowance]] = (
    weakref.WeakKeyDictionary()
)
_registry_lock = threading.Lock()


def allowance(engine: sa.Engine, key: str) -> LocalAllowance:
    """This process's allowance for `key` on `engine`'s database."""
    with _registry_lock:
        per_engine = _allowances.setdefault(engine, {})
        found = per_engine.get(key)
        if found is None:
            found = per_engine[key] = LocalAllowance(key)
        return found


def acquire(
    engine: sa.Engine,
    key: str,
    *,
    rate: float,
    per_seconds: float = 1.0,
    burst: float | None = None,
    now: datetime,
) -> float:
    """Spend one of this process's tokens for `key`: 0.0, or seconds to wait."""
    return allowance(engine, key).acquire(
        engine, rate=rate, per_seconds=per_seconds, burst=burst, now=now
    )
