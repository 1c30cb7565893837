"""Circuit breakers per destination key (`webhook:crm`, `smtp:default`), shared through
the `circuit_breakers` table by every worker process on every host.

States:

- `closed` — attempts flow; consecutive transient failures are counted.
- `open` — after `threshold` consecutive failures: attempts wait (the job is snoozed,
  its attempt not counted) until `retry_at`. An operator may also open a breaker by
  hand (`open_breaker`); without `until` it then stays open until closed by hand.
- `half_open` — `retry_at` passed: exactly one caller wins the compare-and-set and
  sends a probe; everyone else keeps waiting. The probe's success closes the breaker,
  its failure re-opens it with a doubled cooldown (capped). A probe whose worker died
  is given up after `PROBE_TIMEOUT` and another probe may go.

A missing row is a closed breaker with no failures, so nothing needs declaring.
Every function takes `conn` first and `now`; the caller owns the transaction (on SQLite
it began with `BEGIN IMMEDIATE`, so each call is the only writer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import NotFoundError
from jobdesk.shared.core.masking import sanitize_error
from jobdesk.shared.core.models import KEY_LENGTH
from jobdesk.shared.limits.models import BreakerState, circuit_breakers

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN

DEFAULT_THRESHOLD = 5
DEFAULT_COOLDOWN = timedelta(seconds=30)
DEFAULT_MAX_COOLDOWN = timedelta(minutes=30)
#: How long a half-open probe may take before another caller may probe instead.
PROBE_TIMEOUT = timedelta(seconds=60)
#: What callers are told to wait while a breaker is held open by hand.
MANUAL_OPEN_RECHECK = timedelta(seconds=60)
_ERROR_CHARS = 1000

_bc = circuit_breakers.c


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One breaker as the dashboard and the CLI show it."""

    key: str
    state: str
    consecutive_failures: int
    opened_at: datetime | None
    retry_at: datetime | None
    last_error: str | None
    updated_at: datetime | None

    @property
    def manual(self) -> bool:
        """Opened by an operator with no end: only `close_breaker` closes it."""
        return self.state == OPEN and self.retry_at is None

    def retry_in_seconds(self, now: datetime) -> float:
        """Seconds until the next probe may go (0 when it may go now or never waits)."""
        if self.state == CLOSED:
            return 0.0
        if self.retry_at is None:
            return MANUAL_OPEN_RECHECK.total_seconds()
        return max(0.0, (self.retry_at - now).total_seconds())


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key or len(key) > KEY_LENGTH:
        raise ValueError(f"breaker key must be 1-{KEY_LENGTH} characters")
    return key


def _closed_view(key: str) -> BreakerView:
    return BreakerView(key, CLOSED, 0, None, None, None, None)


def _view(row: Any) -> BreakerView:
    return BreakerView(
        key=row.key,
        state=row.state,
        consecutive_failures=row.consecutive_failures,
        opened_at=row.opened_at,
        retry_at=row.retry_at,
        last_error=row.last_error,
        updated_at=row.updated_at,
    )


def breaker_state(conn: sa.Connection, key: str, now: datetime) -> BreakerView:
    """The breaker under `key` (a closed view when it never failed)."""
    del now  # part of the signature so views can later be computed relative to it
    row = conn.execute(sa.select(circuit_breakers).where(_bc.key == _check_key(key))).first()
    return _closed_view(key) if row is None else _view(row)


def list_breakers(conn: sa.Connection) -> list[BreakerView]:
    """Every breaker that ever recorded a failure or was opened, open ones first."""
    order = sa.case((_bc.state == OPEN, 0), (_bc.state == HALF_OPEN, 1), else_=2)
    rows = conn.execute(sa.select(circuit_breakers).order_by(order, _bc.key))
    return [_view(row) for row in rows]


def allow_attempt(
    conn: sa.Connection, key: str, now: datetime, *, probe_timeout: timedelta = PROBE_TIMEOUT
) -> tuple[bool, float]:
    """May a request to `key` go now? Returns (allowed, seconds to wait if not).

    Closed: allowed. Open before `retry_at`: not allowed, wait until then. Open after
    `retry_at`: one caller atomically moves it to half-open and probes; the others wait.
    """
    view = breaker_state(conn, key, now)
    if view.state == CLOSED:
        return True, 0.0
    if view.state == OPEN and (view.retry_at is None or view.retry_at > now):
        return False, view.retry_in_seconds(now)
    # Compare-and-set: only the caller whose UPDATE matches becomes the probe. On
    # PostgreSQL a concurrent UPDATE waits for the row lock and then re-checks the WHERE
    # against the new row (state half_open, updated_at = now), so it no longer matches.
    stale_probe = now - probe_timeout
    won = conn.execute(
        sa.update(circuit_breakers)
        .where(
            _bc.key == key,
            sa.or_(
                sa.and_(_bc.state == OPEN, _bc.retry_at.is_not(None), _bc.retry_at <= now),
                sa.and_(_bc.state == HALF_OPEN, _bc.updated_at <= stale_probe),
            ),
        )
        .values(state=HALF_OPEN, updated_at=now)
        .returning(_bc.key)
    ).first()
    if won is not None:
        return True, 0.0
    # Someone else is probing: check back when their probe must have finished.
    return False, max(1.0, min(probe_timeout.total_seconds(), 5.0))


def record_success(conn: sa.Connection, key: str, now: datetime) -> None:
    """A request to `key` succeeded: close the breaker and reset its failure count.

    A breaker an operator holds open (no `retry_at`) stays open: a late success from a
    request that started before the pause must not undo the pause.
    """
    conn.execute(
        sa.update(circuit_breakers)
        .where(
            _bc.key == _check_key(key),
            sa.or_(_bc.state != CLOSED, _bc.consecutive_failures != 0),
            sa.or_(_bc.state != OPEN, _bc.retry_at.is_not(None)),
        )
        .values(
            state=CLOSED,
            consecutive_failures=0,
            opened_at=None,
            retry_at=None,
            last_error=None,
            updated_at=now,
        )
    )


def _ensure_row(conn: sa.Connection, key: str, now: datetime) -> None:
    conn.execute(
        driver(conn)
        .insert(circuit_breakers)
        .values(key=key, state=CLOSED, consecutive_failures=0, updated_at=now)
        .on_conflict_do_nothing(index_elements=[_bc.key])
    )


def _locked_row(conn: sa.Connection, key: str) -> Any:
    query = sa.select(circuit_breakers).where(_bc.key == key)
    return conn.execute(driver(conn).for_update(query)).one()


def record_failure(
    conn: sa.Connection,
    key: str,
    now: datetime,
    error: str,
    *,
    threshold: int = DEFAULT_THRESHOLD,
    cooldown: timedelta = DEFAULT_COOLDOWN,
    max_cooldown: timedelta = DEFAULT_MAX_COOLDOWN,
) -> str:
    """A request to `key` failed transiently; returns the breaker's new state.

    The `threshold`-th consecutive failure opens it for `cooldown`. A failed half-open
    probe re-opens it for twice the previous cooldown, at most `max_cooldown`.
    """
    if threshold < 1:
        raise ValueError("threshold must be >= 1")
    if cooldown <= timedelta(0) or max_cooldown < cooldown:
        raise ValueError("cooldown must be > 0 and <= max_cooldown")
    _check_key(key)
    _ensure_row(conn, key, now)
    row = _locked_row(conn, key)
    failures = row.consecutive_failures + 1
    message = sanitize_error(error, _ERROR_CHARS) or "failure"
    values: dict[str, Any] = {
        "consecutive_failures": failures,
        "last_error": message,
        "updated_at": now,
    }
    state = row.state
    if state == HALF_OPEN:
        previous = (
            row.retry_at - row.opened_at
            if row.retry_at is not None and row.opened_at is not None
            else cooldown
        )
        wait = min(max_cooldown, max(cooldown, previous * 2))
        state = OPEN
        values.update(state=OPEN, opened_at=now, retry_at=now + wait)
    elif state == CLOSED and failures >= threshold:
        state = OPEN
        values.update(state=OPEN, opened_at=now, retry_at=now + cooldown)
    # Already open (a request that started before it opened): count it, keep the timer.
    conn.execute(sa.update(circuit_breakers).where(_bc.key == key).values(**values))
    return str(state)


def open_breaker(
    conn: sa.Connection,
    key: str,
    now: datetime,
    reason: str,
    *,
    until: datetime | None = None,
) -> BreakerView:
    """Operator: open (pause) `key` now. Without `until` it stays open until closed."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to open a breaker")
    if until is not None and until <= now:
        raise ValueError("until must be in the future")
    _check_key(key)
    _ensure_row(conn, key, now)
    conn.execute(
        sa.update(circuit_breakers)
        .where(_bc.key == key)
        .values(
            state=OPEN,
            opened_at=now,
            retry_at=until,
            last_error=sanitize_error(reason, _ERROR_CHARS),
            updated_at=now,
        )
    )
    return breaker_state(conn, key, now)


def close_breaker_for(conn: sa.Connection, key: str, *, actor: str, now: datetime) -> BreakerView:
    """An operator closes a breaker that exists (`NotFoundError` otherwise): closed now,
    its failures forgotten, and the audit row says what it was before."""
    if key not in {view.key for view in list_breakers(conn)}:
        raise NotFoundError("no circuit breaker with that key")
    before = breaker_state(conn, key, now)
    closed = close_breaker(conn, key, now)
    audit.record(
        conn,
        actor=actor,
        action=audit.AuditAction.BREAKER_CLOSE,
        subject=key,
        now=now,
        details={"was": before.state, "consecutive_failures": before.consecutive_failures},
    )
    return closed


def close_breaker(conn: sa.Connection, key: str, now: datetime) -> BreakerView:
    """Operator: close `key` now and forget its failures."""
    _check_key(key)
    conn.execute(
        sa.update(circuit_breakers)
        .where(_bc.key == key)
        .values(
            state=CLOSED,
            consecutive_failures=0,
            opened_at=None,
            retry_at=None,
            last_error=None,
            updated_at=now,
        )
    )
    return breaker_state(conn, key, now)
