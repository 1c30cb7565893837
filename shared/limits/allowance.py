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
at most one batch (when a quarter of it is left, one thread tops it up to a batch while
the others keep spending, so slots rarely wait for the round trip), so

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


class LocalAllowance:
    """The tokens one process holds for one key, refilled from the shared bucket."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._cond = threading.Condition()
        self._tokens = 0
        self._taken_at: datetime | None = None
        self._empty_until: datetime | None = None
        self._shape: tuple[float, float, float | None] | None = None
        self._batch = 1
        self._generation = 0  # bumped when the limit changes; late refills are dropped
        self._refilling = False

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

        Only a refill opens a transaction of its own (on `engine`); callers must not hold
        a write transaction on SQLite while calling this.
        """
        shape = (rate, per_seconds, burst)
        with self._cond:
            if shape != self._shape:  # first use, or the limit was reconfigured
                self._batch = batch_size(Bucket.of(rate, per_seconds, burst))
                self._shape, self._tokens, self._empty_until = shape, 0, None
                self._generation += 1
            while True:
                if self._tokens and not self._expired(now):
                    self._tokens -= 1
                    # A quarter of a batch left: this thread tops it up while the
                    # others keep spending what is held (held never exceeds a batch).
                    if self._refilling or not 0 < self._tokens <= self._batch // 4:
                        return 0.0
                    return self._refill(engine, self._batch - self._tokens, now, spent=True)
                self._tokens = 0
                known = self._known_wait(now)
                if known is not None:
                    return known
                if not self._refilling:
                    return self._refill(engine, self._batch, now, spent=False)
                self._cond.wait()  # another thread is asking the bucket: use its answer

    def _refill(self, engine: sa.Engine, want: int, now: datetime, *, spent: bool) -> float:
        """Take up to `want` tokens (called holding the lock, which it drops meanwhile);
        `spent`: the caller already has its token."""
        assert self._shape is not None
        rate, per_seconds, burst = self._shape
        generation, self._refilling = self._generation, True
        self._cond.release()
        try:
            with engine.begin() as conn:
                taken, wait = try_acquire_many(
                    conn, self.key, want, rate=rate, per_seconds=per_seconds, burst=burst, now=now
                )
        finally:
            self._cond.acquire()
            self._refilling = False
            self._cond.notify_all()
        if generation != self._generation:  # the limit changed meanwhile
            taken = 0
        self._taken_at = now
        if taken:
            self._empty_until = None
            self._tokens += taken if spent else taken - 1
            return 0.0
        if spent:
            return 0.0
        self._empty_until = now + timedelta(seconds=min(wait, MAX_HOLD_SECONDS))
        return wait

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
