"""What a handler gets besides its payload: `ctx`.

`ctx` tells the handler which job and attempt it is running, gives it a logger bound to
the job, lets it report progress, and offers `once()` — the effects ledger's helper:

- `ctx.once(key, fn)` with an `fn` taking one argument calls it with the connection of
  the transaction that records `key` in the ledger: an effect written to the same
  database commits together with its ledger row, or not at all — exactly once per key.
- `ctx.once(key, fn)` with an `fn` taking no argument is for effects outside the
  database (an email, a POST): the key is reserved and committed first, `fn()` runs,
  and the key is recorded done right after. At most once per key, except the one
  repeat a crash (or a database that stays away) between the effect and its record can
  cause, and that repeat carries the same key-derived id for the receiver to drop.

Jobdesk's own database work here (the ledger, progress) is retried like the runtime's
(`resilience.retry_db`: jittered backoff on `OperationalError`/`InterfaceError`) for up
to one lease, within the attempt's deadline; when the database is still unavailable,
`DatabaseUnavailable` — a `Snooze` — ends the attempt without counting it. Database
trouble never walks a job towards `dead`; the handler's own failures still do.

An `async def` handler gets the same `ctx`; its database work has awaitable twins that
run it off the event loop: `progress_async`, `effect_done_async`, `record_effect_async`,
`once_async` (whose outside effect may be an `async def`). `ctx.cancelled.is_set()` is
the same flag; the hard stop of a coroutine is the cancellation of its task.

`with_outcome(write)` hands the worker a write to make in the transaction that records
the attempt's outcome (the completer's batch) instead of in a transaction of its own: a
record of what the handler did — a delivery log row, an effect marked done — commits
with the job's new state, or not at all, and costs no round trip or commit of its own.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import (
    Reservation,
    check_effect_key,
    complete_effect,
    find_effect,
    release_effect,
    reserve_effect,
)
from jobdesk.shared.core.errors import DatabaseUnavailable, Snooze
from jobdesk.shared.core.transitions import record_progress
from jobdesk.shared.secrets.keys import sealer_for
from jobdesk.shared.secrets.store import open_secrets, sealed_secrets
from jobdesk.shared.settings import Settings
from jobdesk.shared.workflows.batches import BatchView, ChildResult, batch_of, child_results
from jobdesk.shared.workflows.batches import view as batch_view
from jobdesk.worker import failpoints
from jobdesk.worker.resilience import DB_ERRORS, retry_db

T = TypeVar("T")

#: A write made in the caller's transaction (`JobContext.with_outcome`).
OutcomeWrite = Callable[[sa.Connection], None]

#: How long an attempt waits, inline and then snoozed, when another attempt holds the
#: reservation of its effect (and how often it looks again while waiting inline).
EFFECT_WAIT_SECONDS = 2.0
EFFECT_POLL_SECONDS = 0.05

#: After Jobdesk's own database work failed for a lease: back in the queue this soon.
DB_SNOOZE_SECONDS = 1.0
#: Retrying stops this long before the attempt's hard timeout, so the attempt ends
#: snoozed (not counted) rather than timed out (counted).
DEADLINE_MARGIN_SECONDS = 1.0

#: What `once()` runs: `fn()` for an outside effect, `fn(conn)` for one in the database.
Detail = dict[str, Any] | None


class _EffectFailed(Exception):
    """Carries a database error raised by the handler's own `fn(conn)` through the retry
    loop untouched: a failing statement of the handler's is its failure, not ours."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """Adds the job id, type and attempt to every record (and to JSON log lines)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


#: `JobContext.kept_trace` before anyone looked: `drain()` reads it per attempt, a worker
#: with tracing on reads its claimed batch's at once (`executor.attach_traces`).
UNREAD: Any = object()


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
    _secrets: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)
    kept_trace: Any = field(default=UNREAD, init=False, repr=False, compare=False)
    """With tracing on: the trace context kept at enqueue, read with the claimed batch
    (`UNREAD` until then; None: the job has none)."""

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
        ref = self.ref

        def write() -> bool:
            with self.engine.begin() as conn:
                return record_progress(conn, ref, value)

        return self.db_call("ctx.progress", write)

    @property
    def secrets(self) -> dict[str, str]:
        """The job's secrets (`enqueue(..., secrets=…)`), opened with the worker's
        `JOBDESK_ENCRYPTION_KEYS` on first use; `{}` when it has none. Never log them."""
        if self._secrets is None:

            def read() -> dict[str, str]:
                with self.engine.connect() as conn:
                    return sealed_secrets(conn, self.job_id)

            sealed = self.db_call("reading the job's secrets", read)
            if not sealed:
                self._secrets = {}
            else:
                sealer = sealer_for(self.settings.encryption_keys)
                self._secrets = open_secrets(sealed, sealer, self.job_id)
        return self._secrets

    @property
    def batch(self) -> BatchView | None:
        """The batch this job is a child or a callback of (`enqueue_batch`): `.id`,
        `.name`, `.total`, `.counts` (children by status, read now) and
        `.results(after_id=…)` paging through the children's results; None outside a
        batch."""

        def read() -> BatchView | None:
            with self.engine.connect() as conn:
                batch_id = batch_of(conn, self.job_id)
                if batch_id is None:
                    return None
                return batch_view(conn, batch_id, functools.partial(self._batch_page, batch_id))

        return self.db_call("reading the job's batch", read)

    async def batch_async(self) -> BatchView | None:
        """`batch` from a coroutine."""
        return await asyncio.to_thread(lambda: self.batch)

    def _batch_page(self, batch_id: int, after_id: int, limit: int) -> list[ChildResult]:
        def read() -> list[ChildResult]:
            with self.engine.connect() as conn:
                return child_results(conn, batch_id, after_id=after_id, limit=limit)

        return self.db_call("reading the batch's results", read)

    @property
    def ref(self) -> JobRef:
        """This attempt's fencing key (job id + lease token)."""
        return JobRef(self.job_id, self.lease_token, self.attempt, self.worker_id)

    def db_call(self, what: str, work: Callable[[], T]) -> T:
        """`work()` — Jobdesk's own database work for this attempt (the ledger, progress,
        the built-in handlers' lookups) — retried on database errors for up to a lease,
        never past the attempt's deadline; `DatabaseUnavailable` (the attempt ends
        snoozed, not counted) when the database stayed away. `work` must be safe to
        run again: one transaction of its own, or reads."""
        now = time.monotonic()
        until = now + self.settings.lease_seconds
        if self.deadline is not None:
            until = min(until, self.deadline - DEADLINE_MARGIN_SECONDS)
        try:
            return retry_db(work, until=until, stop=self.cancelled)
        except DB_ERRORS as exc:
            self.log.warning(
                "database unavailable during %s after %.1fs of retries "
                "(DatabaseUnavailable: the attempt ends snoozed, not counted)",
                what,
                time.monotonic() - now,
                extra={"action": "ctx_db_unavailable", "what": what},
            )
            raise DatabaseUnavailable(what, exc, DB_SNOOZE_SECONDS) from exc

    def effect_done(self, key: str) -> dict[str, Any] | None:
        """The stored detail if the effect under `key` already happened, else None."""

        def read() -> dict[str, Any] | None:
            with self.engine.connect() as conn:
                return find_effect(conn, key)

        return self.db_call(f"ctx.effect_done({key!r})", read)

    def record_effect(self, key: str, detail: dict[str, Any] | None = None) -> bool:
        """Record the effect under `key` as done (committed at once; retried, then
        `DatabaseUnavailable`)."""
        failpoints.hit(failpoints.BEFORE_RECORD)
        ref = self.ref

        def write() -> bool:
            with self.engine.begin() as conn:
                return complete_effect(conn, key, ref, detail)

        return self.db_call(f"ctx.record_effect({key!r})", write)

    def reserve(self, key: str, wait: float = EFFECT_WAIT_SECONDS) -> Reservation:
        """Claim `key` before doing its effect (committed at once): `mine`, `done` (skip)
        or `held` by another attempt that still holds its job — waited for up to `wait`
        seconds, since that attempt is usually about to finish."""
        ref = self.ref

        def take() -> Reservation:
            with self.engine.begin() as conn:
                return reserve_effect(conn, key, ref, now=db_now(conn))

        deadline = time.monotonic() + wait
        while True:
            reservation = self.db_call(f"ctx.reserve({key!r})", take)
            if not reservation.held or time.monotonic() >= deadline or self.cancelled.is_set():
                return reservation
            time.sleep(EFFECT_POLL_SECONDS)

    def release(self, key: str) -> None:
        """Give up the reservation of an effect that certainly did not happen.

        Called on the way out of a failed effect, so a database that stays away is
        logged, not raised: the handler's own error is the one that matters, and the
        reservation passes to the next attempt anyway once this one no longer holds
        its job.
        """
        ref = self.ref

        def give_up() -> None:
            with self.engine.begin() as conn:
                release_effect(conn, key, ref)

        try:
            self.db_call(f"ctx.release({key!r})", give_up)
        except DatabaseUnavailable:
            self.log.warning(
                "reservation of effect %s not released (database unavailable); the next "
                "attempt takes it over",
                key,
                extra={"action": "effect_release_failed"},
            )

    @overload
    def once(self, key: str, effect: Callable[[], Detail]) -> dict[str, Any]: ...

    @overload
    def once(self, key: str, effect: Callable[[sa.Connection], Detail]) -> dict[str, Any]: ...

    def once(self, key: str, effect: Callable[..., Detail]) -> dict[str, Any]:
        """Run `effect` unless `key` is already in the ledger; returns the stored detail
        (what `effect` returned, or `{}`).

        `effect(conn)` — one required positional parameter — is an effect in this
        database: it runs inside the transaction that records `key`, and its writes
        commit together with the ledger row, exactly once per key. Do only database
        work on `conn` there (the transaction stays open while `effect` runs), neither
        commit nor roll it back (it is Jobdesk's), and let its errors propagate. If
        that transaction is lost — at COMMIT too, where nobody can tell whether it
        committed — it is retried from the ledger: a committed key is found done and
        `effect` is not run again.

        `effect()` — no parameter — is an effect outside the database: the key is
        reserved (a second job with the same key running at the same moment waits, is
        snoozed and then finds it done), `effect()` runs, and the key is recorded done
        right after. `effect` should carry an id derived from `key` to the outside
        world, so the one repeat a crash between the effect and its record can cause is
        recognisable there.
        """
        if _takes_connection(effect):
            return self._once_in_transaction(key, effect)
        reservation = self.reserve(key)
        done = self._done_or_mine(key, reservation)
        if done is not None:
            return done
        try:
            detail = effect() or {}
        except BaseException:
            self.release(key)
            raise
        self._record_done(key, detail)
        return detail

    def _done_or_mine(self, key: str, reservation: Reservation) -> dict[str, Any] | None:
        """The stored detail when `key` is done already (skip the effect), None when the
        reservation is this attempt's (do it); a `Snooze` while another attempt has it."""
        if reservation.done is not None:
            return self._skipped(key, reservation)
        if reservation.held:
            raise Snooze(
                EFFECT_WAIT_SECONDS,
                f"effect {key} is being done by job #{reservation.by_job}; waiting for it",
            )
        return None

    # ------------------------------------------------------------------ asyncio
    # For `async def` handlers: the same database work, run on a thread so the event
    # loop (and every other coroutine on it) goes on meanwhile.

    async def progress_async(self, done: int, total: int | None = None, **extra: Any) -> bool:
        """`progress` from a coroutine."""
        return await asyncio.to_thread(self.progress, done, total, **extra)

    async def secrets_async(self) -> dict[str, str]:
        """`secrets` from a coroutine (the first read goes to the database)."""
        if self._secrets is not None:
            return self._secrets
        return await asyncio.to_thread(lambda: self.secrets)

    async def effect_done_async(self, key: str) -> dict[str, Any] | None:
        """`effect_done` from a coroutine."""
        return await asyncio.to_thread(self.effect_done, key)

    async def record_effect_async(self, key: str, detail: dict[str, Any] | None = None) -> bool:
        """`record_effect` from a coroutine."""
        return await asyncio.to_thread(self.record_effect, key, detail)

    async def once_async(self, key: str, effect: Callable[..., Any]) -> dict[str, Any]:
        """`once` from a coroutine. An `async def` effect taking no argument (an effect
        outside the database: a POST with an async client) is awaited between the
        reservation of `key` and its record; any other effect is run by `once` itself
        on a thread (an `effect(conn)` in this database included)."""
        if not inspect.iscoroutinefunction(effect):
            return await asyncio.to_thread(self.once, key, effect)
        check_effect_key(key)
        reservation = await asyncio.to_thread(self.reserve, key)
        done = self._done_or_mine(key, reservation)
        if done is not None:
            return done
        try:
            detail: dict[str, Any] = await effect() or {}
        except BaseException:
            await asyncio.to_thread(self.release, key)
            raise
        await asyncio.to_thread(self._record_done, key, detail)
        return detail

    def _skipped(self, key: str, reservation: Reservation) -> dict[str, Any]:
        self.log.info(
            "effect %s already done by job %s; skipped",
            key,
            reservation.by_job,
            extra={"action": "effect_skip", "by_job": reservation.by_job},
        )
        assert reservation.done is not None
        return reservation.done

    def record_after_effect(self, what: str, write: OutcomeWrite) -> None:
        """Make `write(conn)` — the record of something this attempt already did outside
        (an effect marked done, a delivery logged, a destination's health) — in a
        transaction of its own now, retried like `db_call`. When the database stays
        away, the write goes with the attempt's outcome instead (`with_outcome`: the
        completer retries it until it commits): such a record is never given up, or
        the work would be done again; and the handler's own ending (its result, its
        error) stays what it was."""

        def now() -> None:
            with self.engine.begin() as conn:
                write(conn)

        try:
            self.db_call(what, now)
        except DatabaseUnavailable:
            if self._outcome_writes is None:
                raise
            self.log.warning(
                "%s: database unavailable; written with the attempt's outcome instead",
                what,
                extra={"action": "record_deferred", "what": what},
            )
            self.with_outcome(write)

    def _record_done(self, key: str, detail: dict[str, Any]) -> None:
        """Record an outside effect that happened (see `record_after_effect`)."""
        failpoints.hit(failpoints.BEFORE_RECORD)
        ref = self.ref
        self.record_after_effect(
            f"ctx.once({key!r}) record",
            lambda conn: _complete_quietly(conn, key, ref, detail),
        )

    def _once_in_transaction(
        self, key: str, effect: Callable[[sa.Connection], Detail]
    ) -> dict[str, Any]:
        check_effect_key(key)
        ref = self.ref

        def apply() -> tuple[Reservation, dict[str, Any]]:
            # The ledger row first: a second transaction with the same key waits on it
            # (PostgreSQL's unique index; SQLite's write lock) and then finds it done.
            # After a lost COMMIT this is also where a committed key is found done.
            with self.engine.begin() as conn:
                reservation = reserve_effect(conn, key, ref, now=db_now(conn))
                if not reservation.mine:
                    return reservation, {}
                try:
                    detail = effect(conn) or {}
                except DB_ERRORS as exc:
                    if getattr(exc, "connection_invalidated", False):
                        raise  # the connection died under it: nothing committed, retry
                    raise _EffectFailed(exc) from None
                complete_effect(conn, key, ref, detail)
                return reservation, detail

        wait_until = time.monotonic() + EFFECT_WAIT_SECONDS
        while True:
            try:
                reservation, detail = self.db_call(f"ctx.once({key!r})", apply)
            except _EffectFailed as failed:
                error = failed.error
            else:
                if reservation.mine:
                    return detail
                if reservation.done is not None:
                    return self._skipped(key, reservation)
                if time.monotonic() >= wait_until or self.cancelled.is_set():
                    raise Snooze(
                        EFFECT_WAIT_SECONDS,
                        f"effect {key} is being done by job #{reservation.by_job}; waiting for it",
                    )
                time.sleep(EFFECT_POLL_SECONDS)
                continue
            raise error


def _complete_quietly(conn: sa.Connection, key: str, ref: JobRef, detail: dict[str, Any]) -> None:
    complete_effect(conn, key, ref, detail)


def _takes_connection(effect: Callable[..., Any]) -> bool:
    """True when `effect` has exactly one required positional parameter (the
    connection), False when it needs none; anything else is refused before any work."""
    try:
        parameters = inspect.signature(effect).parameters.values()
    except (TypeError, ValueError):  # some builtins and C callables have no signature
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.default is p.empty]
    needed = [p for p in required if p.kind in positional]
    keyword = [p for p in required if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if len(needed) > 1 or keyword:
        names = ", ".join(p.name for p in (*needed, *keyword))
        raise TypeError(
            f"ctx.once: the effect must take no argument (an outside effect) or one, the "
            f"connection (an effect in this database); it requires {names}"
        )
    return len(needed) == 1
