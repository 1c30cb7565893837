"""What a handler gets besides its payload: `ctx`.

`ctx` tells the handler which job and attempt it is running, gives it a logger bound to
the job, lets it report progress, and offers `once()` — the effects-ledger helper that
makes a side effect happen at most once per stable key across retries and crashes.

`with_outcome(write)` hands the worker a write to make in the transaction that records
the attempt's outcome (the completer's batch) instead of in a transaction of its own: a
record of what the handler did — a delivery log row, an effect marked done — commits
with the job's new state, or not at all, and costs no round trip or commit of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import (
    Reservation,
    complete_effect,
    find_effect,
    release_effect,
    reserve_effect,
)
from jobdesk.shared.core.errors import Snooze
from jobdesk.shared.core.transitions import record_progress
from jobdesk.shared.settings import Settings
from jobdesk.worker import failpoints

T = TypeVar("T")

#: A write made in the caller's transaction (`JobContext.with_outcome`).
OutcomeWrite = Callable[[sa.Connection], None]

#: How long an attempt waits, inline and then snoozed, when another attempt holds the
#: reservation of its effect (and how often it looks again while waiting inline).
EFFECT_WAIT_SECONDS = 2.0
EFFECT_POLL_SECONDS = 0.05


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """Adds the job id, type and attempt to every record (and to JSON log lines)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


@dataclass
class JobContext:
    """Per-attempt context handed to `handler(payload, ctx)`."""

    job_id: int
    job_type: str
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    engine: sa.Engine
    worker_id: str = ""
    lease_token: int = 0
    """The claim's fencing token: every write of this attempt carries it."""
    settings: Settings = field(default_factory=Settings.from_env)
    """The settings the worker runs with (the built-in types read theirs from here);
    a context made by hand (a handler's unit test) reads the environment."""
    deadline: float | None = None
    """`time.monotonic()` value at which the attempt's hard timeout fires."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set when an operator cancelled the running job, the attempt timed out, its lease
    was lost or the worker is shutting down; long handlers should check it between steps
    (or `wait()` on it instead of sleeping) and stop early. After a cancel the handler has
    `JOBDESK_CANCEL_GRACE_SECONDS` before it is stopped hard; raising ends the job
    `cancelled`, returning a value records the work as done (`succeeded`)."""
    _log: logging.LoggerAdapter[logging.Logger] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _outcome_writes: list[OutcomeWrite] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger bound to the job (its id, type and attempt on every record).

        Built on first use: most handlers never log, and `logging.getLogger` plus the
        adapter were over half of building a context — once per job on the worker's
        hot path.
        """
        log = self._log
        if log is None:
            log = self._log = JobLogger(
                logging.getLogger(f"jobdesk.job.{self.job_type}"),
                {"job_id": self.job_id, "job_type": self.job_type, "attempt": self.attempt},
            )
        return log

    def with_outcome(self, write: OutcomeWrite) -> None:
        """Make `write(conn)` in the transaction that records this attempt's outcome.

        Under a worker the write waits for the attempt to end and goes in with its
        outcome, whatever that outcome is; should the outcome be settled by someone
        else first (a timeout, a lost lease), the write is made on its own when the
        handler returns. A context made by hand (a handler's unit test) makes it now.
        """
        if self._outcome_writes is None:
            with self.engine.begin() as conn:
                write(conn)
            return
        self._outcome_writes.append(write)

    def collect_outcome_writes(self) -> None:
        """From now on `with_outcome` collects (the executor, before the handler runs)."""
        self._outcome_writes = []

    def take_outcome_writes(self) -> tuple[OutcomeWrite, ...]:
        """The writes collected while the handler ran; collecting stops (the executor,
        when the handler returned)."""
        writes, self._outcome_writes = self._outcome_writes, None
        return tuple(writes) if writes else ()

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, done: int, total: int | None = None, **extra: Any) -> bool:
        """Record progress on the job row (visible in the dashboard right away); False
        when this attempt no longer holds the job (its lease was lost), like every
        other write of a worker that lost its lease."""
        value: dict[str, Any] = {"done": done, "total": total, **extra}
        ref = JobRef(self.job_id, self.lease_token, self.attempt, self.worker_id)
        with self.engine.begin() as conn:
            return record_progress(conn, ref, value)

    @property
    def ref(self) -> JobRef:
        """This attempt's fencing key (job id + lease token)."""
        return JobRef(self.job_id, self.lease_token, self.attempt, self.worker_id)

    def effect_done(self, key: str) -> dict[str, Any] | None:
        """The stored detail if the effect under `key` already happened, else None."""
        with self.engine.connect() as conn:
            return find_effect(conn, key)

    def record_effect(self, key: str, detail: dict[str, Any] | None = None) -> bool:
        """Record the effect under `key` as done (committed at once)."""
        failpoints.hit(failpoints.BEFORE_RECORD)
        with self.engine.begin() as conn:
            return complete_effect(conn, key, self.ref, detail)

    def reserve(self, key: str, wait: float = EFFECT_WAIT_SECONDS) -> Reservation:
        """Claim `key` before doing its effect (committed at once): `mine`, `done` (skip)
        or `held` by another attempt that still holds its job — waited for up to `wait`
        seconds, since that attempt is usually about to finish."""
        deadline = time.monotonic() + wait
        while True:
            with self.engine.begin() as conn:
                reservation = reserve_effect(conn, key, self.ref, now=db_now(conn))
            if not reservation.held or time.monotonic() >= deadline or self.cancelled.is_set():
                return reservation
            time.sleep(EFFECT_POLL_SECONDS)

    def release(self, key: str) -> None:
        """Give up the reservation of an effect that certainly did not happen."""
        with self.engine.begin() as conn:
            release_effect(conn, key, self.ref)

    def once(self, key: str, effect: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        """Run `effect()` unless `key` is already in the ledger; returns the stored detail.

        The key is reserved first, so a second job with the same key running at the same
        moment waits (it is snoozed, no attempt counted) and then finds the effect done.
        `effect` should carry an id derived from `key` to the outside world, so the one
        repeat a crash at the worst moment can cause is recognisable there.
        """
        reservation = self.reserve(key)
        if reservation.done is not None:
            self.log.info(
                "effect %s already done by job %s; skipped",
                key,
                reservation.by_job,
                extra={"action": "effect_skip", "by_job": reservation.by_job},
            )
            return reservation.done
        if reservation.held:
            raise Snooze(
                EFFECT_WAIT_SECONDS,
                f"effect {key} is being done by job #{reservation.by_job}; waiting for it",
            )
        try:
            detail = effect() or {}
        except BaseException:
            self.release(key)
            raise
        self.record_effect(key, detail)
        return detail
