"""Surviving database outages: capped, jittered retry delays and the errors that earn one.

A worker never exits because the database went away (D1, D3): every loop that talks
to the database catches `DB_ERRORS`, waits `Backoff.next()` and tries again, logging
once when the outage starts and once when it ends.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa

from jobdesk.shared.core.errors import missing_schema, with_pooler_hint

#: Errors that mean "the database is unreachable or refused this round"; anything else
#: is a bug and is logged with its stack, then retried the same way.
DB_ERRORS: tuple[type[BaseException], ...] = (sa.exc.OperationalError, sa.exc.InterfaceError)

INITIAL_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0

T = TypeVar("T")


@dataclass
class Backoff:
    """Full-jitter exponential delays between `initial` and `cap` seconds."""

    initial: float = INITIAL_DELAY_SECONDS
    cap: float = MAX_DELAY_SECONDS
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        ceiling = min(self.cap, self.initial * 2 ** min(self.failures - 1, 20))
        # The module's shared generator: a Random of its own per Backoff seeded itself
        # from os.urandom on every handler database call (4 % of a webhook worker's CPU),
        # though almost none of them ever waits.
        return random.uniform(self.initial / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


def retry_db(
    call: Callable[[], T],
    *,
    until: float,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
    retryable: Callable[[BaseException], bool] | None = None,
) -> T:
    """`call()`, tried again after `DB_ERRORS` with `backoff` delays while the next try
    can still start before `until` (a `time.monotonic()` value) and `stop` is not set;
    the last error is raised when the time is up. `retryable` may narrow which of
    `DB_ERRORS` earn another try.

    For work with a deadline of its own — a handler's attempt — where the runtime's
    loops (heartbeat, completer) retry until the database is back.
    """
    backoff = backoff or Backoff(cap=1.0)
    while True:
        try:
            return call()
        except DB_ERRORS as exc:
            if retryable is not None and not retryable(exc):
                raise
            delay = backoff.next()
            if time.monotonic() + delay >= until or (stop is not None and stop.is_set()):
                raise
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)


class OutageLog:
    """Logs the first failure of an outage and the recovery, not every retry."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self._down = False
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, delay: float) -> None:
        with self._lock:
            first = not self._down
            self._down = True
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        message = with_pooler_hint(detail[0]) if detail else type(exc).__name__
        schema = missing_schema(exc)
        if first and schema is not None:
            # Reachable but not migrated (often: the migration job has not run yet).
            self._log.warning(
                "%s: %s; retrying with backoff",
                self._what,
                schema,
                extra={"action": "schema_missing", "task": self._what},
            )
        elif first:
            self._log.warning(
                "%s: database unavailable (%s); retrying with backoff",
                self._what,
                message,
                extra={"action": "db_unavailable", "task": self._what},
            )
        else:
            self._log.debug(
                "%s: still unavailable; next try in %.2fs",
                self._what,
                delay,
                extra={"action": "db_retry", "task": self._what},
            )

    def recovered(self) -> None:
        with self._lock:
            was_down = self._down
            self._down = False
        if was_down:
            self._log.info(
                "%s: database reachable again",
                self._what,
                extra={"action": "db_recovered", "task": self._what},
            )


class HeldConnection:
    """One connection kept checked out by a runtime thread (dispatcher, completer).

    Saves the pool's checkout ping on every transaction — a round trip per claim or
    batch on the hot path. After a database error the connection is thrown away and
    the next `begin()` opens a fresh one.
    """

    def __init__(
        self, engine: sa.Engine, before_return: Callable[[sa.Connection], None] | None = None
    ) -> None:
        """`before_return(conn)`: undo what this connection's work set on its session,
        before it goes back to the pool (the claim connection's settings)."""
        self._engine = engine
        self._before_return = before_return
        self._conn: sa.Connection | None = None

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self._engine.connect()
        conn = self._conn
        try:
            with conn.begin():
                yield conn
        except DB_ERRORS:
            self.close(invalidate=True)
            raise

    def close(self, *, invalidate: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if self._before_return is not None and not invalidate:
                try:
                    with conn.begin():
                        self._before_return(conn)
                except Exception:
                    invalidate = True  # a session whose settings stay must not be reused
            if invalidate:
                conn.invalidate()
            conn.close()
