"""Writing attempt outcomes back: `apply_outcomes` (one transaction) and the `Completer`
thread that batches them (River's completer).

Successes of a batch go out as one `complete_many` statement; failures, timeouts and
snoozes use their own transitions in the same transaction. Nothing is acknowledged —
logged as done, dropped from the heartbeat set — until that transaction committed; a
batch whose commit failed is retried with backoff, and while it waits its jobs' leases
keep being extended, so a slow database never turns finished work into "worker lost".
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core import transitions
from jobdesk.shared.core.driver_sql import run_writes
from jobdesk.shared.core.retry import RetryPolicy, decide
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.worker import failpoints
from jobdesk.worker.executor import Attempt, Kind, Outcome
from jobdesk.worker.resilience import DB_ERRORS, Backoff, HeldConnection, OutageLog

log = logging.getLogger("jobdesk.worker")

#: Most outcomes written in one transaction.
MAX_BATCH = 1000

PolicyFor = Callable[[str], RetryPolicy]


class Applied(NamedTuple):
    """What one outcome did to its job: the new status, or None when fenced."""

    outcome: Outcome
    status: JobStatus | None

    @property
    def label(self) -> str:
        """How the attempt ended, for metrics: succeeded, failed, dead, timeout, snoozed,
        released, cancelled or fenced (lease lost: nothing was written)."""
        if self.status is None:
            return "fenced"
        kind = self.outcome.kind
        if kind in (Kind.FAILED, Kind.RETRY_AFTER, Kind.PERMANENT) or (
            self.status is JobStatus.CANCELLED
        ):
            return self.status.value
        return kind.value


#: `record(finished)`: `(job_type, outcome_label, seconds)` of each attempt whose outcome
#: one batch wrote — e.g. `jobdesk.worker.metrics.record_outcomes`. Per batch, so that a
#: hook can count a batch's attempts at once.
RecordOutcomes = Callable[[Sequence[tuple[str, str, float]]], None]


def apply_outcomes(
    conn: sa.Connection, outcomes: Sequence[Outcome], *, now: datetime, policy_for: PolicyFor
) -> list[Applied]:
    """Write every outcome's transition, and the writes the handlers asked to go with
    their outcomes (`ctx.with_outcome`), in the caller's transaction."""
    writes = [write for outcome in outcomes for write in outcome.writes]
    if writes:
        run_writes(conn, writes)
    applied: list[Applied] = []
    successes = [o for o in outcomes if o.kind is Kind.SUCCEEDED]
    if successes:
        completion = transitions.Completion
        done = set(
            transitions.complete_many(
                conn, [completion(o.job, o.result) for o in successes], now=now
            )
        )
        succeeded = JobStatus.SUCCEEDED
        applied.extend([Applied(o, succeeded if o.job.id in done else None) for o in successes])
    for kind, how in _HANDED_BACK.items():
        handed = [o for o in outcomes if o.kind is kind]
        if handed:
            # A cancel request that arrived meanwhile ends the job instead of requeueing it.
            written = transitions.hand_back_many(
                conn, [_handback(o, now) for o in handed], now=now, reason=how
            )
            applied.extend([Applied(o, written.get(o.job.id)) for o in handed])
    for outcome in outcomes:
        if outcome.kind not in _SET_BASED:
            applied.append(Applied(outcome, _apply_one(conn, outcome, now, policy_for)))
    return applied


#: Hand-backs, each kind with the words its cancelled attempt is recorded with. A batch
#: writes each kind in one statement: a busy worker hands back up to a prefetch's worth
#: of unstarted jobs at once.
_HANDED_BACK = {Kind.RELEASED: "released at shutdown", Kind.SNOOZED: "snoozed"}
_SET_BASED = frozenset({Kind.SUCCEEDED, *_HANDED_BACK})


def _handback(outcome: Outcome, now: datetime) -> transitions.HandBack:
    return transitions.HandBack(
        outcome.job.ref, now + timedelta(seconds=outcome.delay_seconds or 0.0)
    )


def _apply_one(
    conn: sa.Connection, outcome: Outcome, now: datetime, policy_for: PolicyFor
) -> JobStatus | None:
    job, kind = outcome.job, outcome.kind
    if kind is Kind.FENCED:
        return None
    if kind is Kind.CANCELLED:
        error = outcome.error or "Cancelled"
        stopped = transitions.stop_cancelled(conn, job.ref, error=error, now=now)
        return JobStatus.CANCELLED if stopped else None
    decision = decide(
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        now=now,
        policy=policy_for(job.job_type),
        permanent=kind is Kind.PERMANENT,
        retry_after=outcome.delay_seconds if kind is Kind.RETRY_AFTER else None,
    )
    attempt_outcome = {
        Kind.TIMEOUT: AttemptOutcome.TIMEOUT,
        Kind.PERMANENT: AttemptOutcome.PERMANENT,
    }.get(kind, AttemptOutcome.FAILED)
    return transitions.fail(
        conn,
        job.ref,
        error=outcome.error or kind.value,
        retry_at=decision.retry_at,
        now=now,
        outcome=attempt_outcome,
    )


def log_applied(applied: Sequence[Applied], worker_id: str) -> None:
    """One line per finished attempt: successes at DEBUG (hot path), the rest at INFO."""
    debug = log.isEnabledFor(logging.DEBUG)
    for item in applied:
        outcome = item.outcome
        quiet = outcome.kind is Kind.SUCCEEDED and item.status is not None
        if quiet and not debug:
            continue
        job = outcome.job
        status = item.status.value if item.status is not None else "fenced"
        extra = {
            "action": "job_finished",
            "job_id": job.id,
            "job_type": job.job_type,
            "queue": job.queue,
            "attempt": job.attempt,
            "duration_ms": round(outcome.duration * 1000, 2),
            "outcome": outcome.kind.value,
            "status": status,
            "worker_id": worker_id,
        }
        level = logging.DEBUG if quiet else logging.INFO
        if item.status is None and outcome.kind is not Kind.FENCED:
            level = logging.WARNING
        first_line = (outcome.error or "").split("\n", 1)[0]
        log.log(
            level,
            "job %s %s attempt %s: %s -> %s%s",
            job.id,
            job.job_type,
            job.attempt,
            outcome.kind.value,
            status,
            f" ({first_line})" if first_line else "",
            extra=extra,
        )


class Completer(threading.Thread):
    """Collects settled attempts and writes them in small batches, in order of arrival."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: Callable[[], datetime],
        policy_for: PolicyFor,
        worker_id: str,
        on_written: Callable[[list[Attempt]], None],
        record_outcomes: RecordOutcomes | None = None,
    ) -> None:
        super().__init__(name="jobdesk-completer", daemon=True)
        self._record_outcomes = record_outcomes
        self._engine = engine
        self._clock = clock
        self._policy_for = policy_for
        self._worker_id = worker_id
        self._on_written = on_written
        self._inbox: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._idle = threading.Condition(self._pending_lock)
        self._outage = OutageLog(log, "completer")
        self._conn = HeldConnection(engine)

    def submit(self, attempt: Attempt) -> None:
        with self._pending_lock:
            self._pending += 1
        self._inbox.put(attempt)

    @property
    def pending(self) -> int:
        return self._pending

    def stop(self) -> None:
        self._inbox.put(None)

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything submitted so far is written (or `timeout` passed)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def run(self) -> None:
        stopping = False
        while not stopping:
            first = self._inbox.get()
            batch: list[Attempt] = []
            if first is None:
                stopping = True
            else:
                batch.append(first)
            while len(batch) < MAX_BATCH:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            if batch:
                self._write(batch)
        self._conn.close()

    def _write(self, batch: list[Attempt]) -> None:
        try:
            applied = self._write_with_retry(batch)
        except Exception:
            # Not an outage but a bug or a constraint: write one by one so one bad
            # outcome cannot hold the others back. An outcome that still cannot be
            # written becomes a failed attempt naming why (dead at once: the handler
            # may have done its work, so it must not run again) — never left to the
            # reaper to call "worker lost" and rerun (B12).
            log.exception(
                "writing %d outcomes failed; writing them one by one",
                len(batch),
                extra={"action": "completer_error"},
            )
            applied = []
            for attempt in batch:
                try:
                    applied.extend(self._write_with_retry([attempt]))
                except Exception as exc:
                    applied.extend(self._write_unstorable(attempt, exc))
        log_applied(applied, self._worker_id)
        if self._record_outcomes is not None and applied:
            self._record_outcomes(
                [(item.outcome.job.job_type, item.label, item.outcome.duration) for item in applied]
            )
        self._on_written(batch)
        with self._idle:
            self._pending -= len(batch)
            if self._pending == 0:
                self._idle.notify_all()

    def _write_unstorable(self, attempt: Attempt, exc: Exception) -> list[Applied]:
        outcome = attempt.outcome
        if outcome is None:
            return []
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        replacement = dataclasses.replace(
            outcome,
            kind=Kind.PERMANENT,
            result=None,
            delay_seconds=None,
            writes=(),  # one of them may be what cannot be written
            error=f"OutcomeNotStorable: the attempt's outcome ({outcome.kind.value}) could "
            f"not be written: {type(exc).__name__}: {reason[0] if reason else ''}",
        )
        try:
            return self._write_outcomes([replacement])
        except Exception:
            log.exception(
                "outcome of job %s could not be written at all; left to the reaper",
                attempt.job.id,
                extra={"action": "completer_dropped", "job_id": attempt.job.id},
            )
            return []

    def _write_with_retry(self, batch: list[Attempt]) -> list[Applied]:
        return self._write_outcomes([a.outcome for a in batch if a.outcome is not None])

    def _write_outcomes(self, outcomes: list[Outcome]) -> list[Applied]:
        backoff = Backoff()
        while True:
            try:
                now = self._clock()  # before BEGIN: the clock may need its own connection
                with self._conn.begin() as conn:
                    applied = apply_outcomes(conn, outcomes, now=now, policy_for=self._policy_for)
                    failpoints.hit(failpoints.MID_COMPLETION)
            except DB_ERRORS as exc:
                delay = backoff.next()
                self._outage.failed(exc, delay)
                time.sleep(delay)
                continue
            self._outage.recovered()
            return applied
