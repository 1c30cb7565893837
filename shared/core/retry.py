"""Retry policy: when a failed attempt runs again, or whether it should at all.

- Exponential backoff with full jitter: the delay for attempt n is drawn uniformly from
  [base, min(cap, base * 2**(n-1))]. The exponent is clamped before it is computed, so
  attempt 60 (or 10**9) costs nothing and cannot overflow.
- Fixed per-type schedules (`Schedule((60, 300, 1800, 7200))`): the n-th delay from the
  list (the last one repeats) plus up to `jitter` of it, so a fleet of jobs that failed
  together does not come back together.
- A `Retry-After` from a provider replaces the computed delay, capped.
- Permanent errors and spent attempts mean `dead`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

MAX_EXPONENT = 30
DEFAULT_BASE = timedelta(seconds=15)
DEFAULT_CAP = timedelta(hours=6)
RETRY_AFTER_CAP = timedelta(hours=24)


@dataclass(frozen=True)
class ExponentialBackoff:
    """Full-jitter exponential backoff between `base` and `cap`."""

    base: timedelta = DEFAULT_BASE
    cap: timedelta = DEFAULT_CAP

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise ValueError("backoff needs 0 < base <= cap")

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        exponent = min(max(attempt, 1) - 1, MAX_EXPONENT)
        base_s = self.base.total_seconds()
        ceiling = min(self.cap.total_seconds(), base_s * (2**exponent))
        seconds = (rng or random).uniform(base_s, ceiling)
        return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Schedule:
    """An explicit list of delays, e.g. 1 min, 5 min, 30 min, 2 h, with added jitter."""

    delays: tuple[timedelta, ...]
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not self.delays or any(d < timedelta(0) for d in self.delays):
            raise ValueError("a schedule needs at least one non-negative delay")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a fraction between 0 and 1")

    @classmethod
    def of_seconds(cls, seconds: Sequence[float], jitter: float = 0.1) -> Schedule:
        return cls(tuple(timedelta(seconds=s) for s in seconds), jitter)

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        index = min(max(attempt, 1) - 1, len(self.delays) - 1)
        base = self.delays[index]
        extra = (rng or random).uniform(0, self.jitter) if self.jitter else 0.0
        return base * (1 + extra)


Backoff = ExponentialBackoff | Schedule


@dataclass(frozen=True)
class RetryPolicy:
    """How one job type retries."""

    backoff: Backoff = field(default_factory=ExponentialBackoff)
    retry_after_cap: timedelta = RETRY_AFTER_CAP


@dataclass(frozen=True)
class RetryDecision:
    """`retry_at` is set when the job runs again; `None` means the job is dead."""

    retry_at: datetime | None
    reason: str

    @property
    def dead(self) -> bool:
        return self.retry_at is None


def decide(
    *,
    attempt: int,
    max_attempts: int,
    now: datetime,
    policy: RetryPolicy | None = None,
    permanent: bool = False,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Choose what happens after attempt number `attempt` (1-based) failed."""
    policy = policy or RetryPolicy()
    if permanent:
        return RetryDecision(None, "permanent error")
    if attempt >= max_attempts:
        return RetryDecision(None, f"attempts exhausted ({attempt}/{max_attempts})")
    if retry_after is not None:
        # Capped in float seconds first: a provider's absurd (or infinite) value must not
        # overflow timedelta; NaN and negatives mean "now".
        seconds = retry_after if retry_after >= 0 else 0.0
        wait = min(seconds, policy.retry_after_cap.total_seconds())
        return RetryDecision(now + timedelta(seconds=wait), "retry-after")
    return RetryDecision(now + policy.backoff.delay(attempt, rng), "backoff")
