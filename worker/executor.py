"""Running ONE claimed job: its handler, its rate limit, and what the attempt came to.

The executor writes no job state. It turns what the handler did into an `Outcome`
(succeeded with a result, failed, permanent, retry-after, snoozed, timed out, released,
cancelled, fenced); `jobdesk.worker.completer.apply_outcomes` turns outcomes into
transitions.

An `Attempt` is settled exactly once, by whoever gets there first: the handler's thread
when it returns, the runner when the hard timeout (or the hard stop after a cancel
request) fires, the shutdown path when it releases the job, or the heartbeat when the
lease was lost. Later arrivals are ignored, so a job is never both released and
completed.

A cancel request (an operator cancelled the running job; the heartbeat brings it) sets
`ctx.cancelled` and moves the attempt's deadline to the end of the grace: a handler that
raises in time is stopped on request, one still running then is stopped hard by the same
path as a timeout. A handler that returns a value after the request finished its work,
and the job succeeds: calling that `cancelled` would hide work done.

What the handler asked to write with its outcome (`ctx.with_outcome`) travels in the
`Outcome`; when the handler's outcome arrives too late to settle the attempt, those
writes are still made, on their own (`Attempt.finish`).

Every way a handler can end is an outcome. `SystemExit` (what `sys.exit` and argparse
raise), `KeyboardInterrupt`, `GeneratorExit` or any other `BaseException` raised by a
handler is a failed attempt ("SystemExit(2) raised by the handler"), not the end of its
slot thread or of the worker: a real Ctrl-C or SIGTERM reaches the worker through its
signal handlers in the main thread, never as an exception in a handler's thread, so a
handler that raises one is a handler bug. An exception whose `str()` or traceback
cannot be formatted is described without them ("<unprintable ValueError>").
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob
from jobdesk.shared.core.driver_sql import run_writes
from jobdesk.shared.core.errors import PermanentError, RetryAfter, Snooze, ValidationError
from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.core.validation import serialize_document
from jobdesk.shared.limits.allowance import acquire
from jobdesk.shared.settings import Settings
from jobdesk.shared.tracing.otel import Attempted, Consuming, conclude, consumer_tracer, consuming
from jobdesk.shared.tracing.store import StoredTrace, trace_of
from jobdesk.worker import failpoints
from jobdesk.worker.context import UNREAD, JobContext, OutcomeWrite
from jobdesk.worker.registry import JobType

#: Frames of traceback kept after the "Type: message" line of a failed attempt.
TRACEBACK_FRAMES = 8

log = logging.getLogger("jobdesk.worker")


class Kind(StrEnum):
    """How an attempt ended, from the worker's point of view."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Any exception: retry with the type's backoff (or dead when attempts are spent)."""
    RETRY_AFTER = "retry_after"
    """`RetryAfter(s)`: a failed attempt that retries after `s` seconds (capped)."""
    PERMANENT = "permanent"
    """`PermanentError`: dead now."""
    TIMEOUT = "timeout"
    """Over the hard timeout: recorded as `timeout`, retries with backoff."""
    SNOOZED = "snoozed"
    """`Snooze(s)` or a rate limit: back to the queue, attempt not counted."""
    RELEASED = "released"
    """Shutdown: handed back unfinished, attempt not counted."""
    CANCELLED = "cancelled"
    """An operator cancelled the running job and the handler stopped (or was stopped hard
    after the grace): the job ends `cancelled`, not retried."""
    FENCED = "fenced"
    """The lease was lost (someone else owns the job now): nothing may be written."""


@dataclass(slots=True)
class Outcome:
    job: ClaimedJob
    kind: Kind
    result: Any = None
    error: str | None = None
    delay_seconds: float | None = None
    duration: float = 0.0
    writes: tuple[OutcomeWrite, ...] = ()
    """`ctx.with_outcome` writes: made in the transaction that records this outcome."""


def describe_exception(exc: BaseException) -> str:
    """`Type: message` on the first line (what fingerprints group by), then the stack.

    Never raises: an exception whose `str()` raises is `<unprintable Type>`, a stack that
    cannot be formatted is left out. A `BaseException` that is not an `Exception`
    (`SystemExit`, `KeyboardInterrupt`, …) is named as raised by the handler."""
    name = _type_name(exc)
    if isinstance(exc, Exception):
        try:
            head = f"{name}: {exc}".rstrip(": ")
        except BaseException:  # its __str__ raised (or returned no str)
            head = f"{name}: <unprintable {name}>"
    else:
        try:
            shown = repr(exc)
        except BaseException:
            shown = f"<unprintable {name}>"
        head = f"{name}: {shown} raised by the handler"
    try:
        stack = "".join(traceback.format_tb(exc.__traceback__, limit=-TRACEBACK_FRAMES))
    except BaseException:
        stack = ""
    return f"{head}\n{stack}" if stack else head


def _type_name(exc: BaseException) -> str:
    try:
        return str(type(exc).__name__)
    except BaseException:  # a metaclass with a hostile __name__
        return "Exception"


def _json_result(result: Any, max_bytes: int) -> Any:
    """The handler's return value, serialised once and checked like a payload (strict
    JSON, no NUL or lone surrogate, depth and size bounded): anything the database could
    not store raises ValidationError here, not later in the completer's batch."""
    if result is None:
        return None
    return serialize_document("result", result, max_bytes)


def capped_delay(seconds: float, policy: RetryPolicy) -> float:
    """A handler's `Snooze` delay, bounded like `RetryAfter` by the type's retry policy:
    `Snooze(float("inf"))` or `Snooze(1e12)` must not become a date nobody can store."""
    cap = float(policy.retry_after_cap.total_seconds())
    return cap if not math.isfinite(seconds) else min(max(float(seconds), 0.0), cap)


def execute(
    job: ClaimedJob,
    job_type: JobType,
    ctx: JobContext,
    *,
    clock: Callable[[], datetime],
) -> Outcome:
    """Run the handler in this thread and classify how it ended (never raises)."""
    ctx.collect_outcome_writes()
    tracer = consumer_tracer()
    if tracer is None:
        outcome = _run(job, job_type, ctx, clock)
    else:
        kept = _kept_trace(ctx, job.id) if ctx.kept_trace is UNREAD else ctx.kept_trace
        with _consuming(job, kept, ctx, clock, tracer) as span:
            outcome = _run(job, job_type, ctx, clock)
            _conclude(span, outcome)
    return _with_writes(outcome, ctx)


async def execute_async(
    job: ClaimedJob,
    job_type: JobType,
    ctx: JobContext,
    *,
    clock: Callable[[], datetime],
) -> Outcome:
    """`execute` for an `async def` handler, awaited on the worker's event loop (never
    raises; a cancellation of its task — the timeout's hard stop — is an outcome too)."""
    ctx.collect_outcome_writes()
    tracer = consumer_tracer()
    if tracer is None:
        outcome = await _run_async(job, job_type, ctx, clock)
    else:
        kept = ctx.kept_trace
        if kept is UNREAD:
            kept = await asyncio.to_thread(_kept_trace, ctx, job.id)
        with _consuming(job, kept, ctx, clock, tracer) as span:
            outcome = await _run_async(job, job_type, ctx, clock)
            _conclude(span, outcome)
    return _with_writes(outcome, ctx)


# --- OpenTelemetry (only when a tracer provider is configured) ---------------------------


def attach_traces(attempts: list[Attempt], found: Mapping[int, StoredTrace]) -> None:
    """Give each attempt the trace context kept at its enqueue (`found`: read for the
    whole claimed batch at once, `traces_of`); an attempt missing from it has none. Kept
    on the attempt, not its context: the slot thread builds that (see `Attempt`)."""
    for attempt in attempts:
        kept = found.get(attempt.job.id)
        attempt.kept_trace = (
            None if kept is None else (kept.traceparent, kept.tracestate, kept.created_at)
        )


def _consuming(
    job: ClaimedJob,
    kept: tuple[str, str | None, datetime] | None,
    ctx: JobContext,
    clock: Callable[[], datetime],
    tracer: Any,
) -> Consuming:
    return consuming(
        Attempted(job.id, job.job_type, job.queue, job.attempt),
        kept,
        now=clock,
        link_after_seconds=ctx.settings.trace_link_after_seconds,
        tracer=tracer,
    )


def _kept_trace(ctx: JobContext, job_id: int) -> tuple[str, str | None, datetime] | None:
    """The trace context kept at enqueue, if any; a database error costs the trace its
    parent, never the attempt."""
    try:
        with ctx.engine.connect() as conn:
            found = trace_of(conn, job_id)
    except sa.exc.SQLAlchemyError:
        return None
    return None if found is None else (found.traceparent, found.tracestate, found.created_at)


def _conclude(span: Any, outcome: Outcome) -> None:
    error_type = outcome.error.split(":", 1)[0] if outcome.error else None
    conclude(span, outcome.kind.value, error_type, outcome.error)


def _with_writes(outcome: Outcome, ctx: JobContext) -> Outcome:
    writes = ctx.take_outcome_writes()
    return dataclasses.replace(outcome, writes=writes) if writes else outcome


def _run(
    job: ClaimedJob, job_type: JobType, ctx: JobContext, clock: Callable[[], datetime]
) -> Outcome:
    start = time.monotonic()
    try:
        if job_type.rate_limit is not None:
            limited = _rate_limited(job, job_type, ctx, clock, start)
            if limited is not None:
                return limited
        result = job_type.handler(job.payload, ctx)
        failpoints.hit(failpoints.AFTER_EFFECT)
        return _returned(job, result, ctx, start)
    except BaseException as exc:  # every way a handler ends is an outcome (see the module)
        return _raised(job, job_type, exc, time.monotonic() - start)


async def _run_async(
    job: ClaimedJob, job_type: JobType, ctx: JobContext, clock: Callable[[], datetime]
) -> Outcome:
    start = time.monotonic()
    try:
        if job_type.rate_limit is not None:
            # A database round trip at times: off the event loop.
            limited = await asyncio.to_thread(_rate_limited, job, job_type, ctx, clock, start)
            if limited is not None:
                return limited
        result = await job_type.handler(job.payload, ctx)
        failpoints.hit(failpoints.AFTER_EFFECT)
        return _returned(job, result, ctx, start)
    except BaseException as exc:  # CancelledError included: see execute_async
        return _raised(job, job_type, exc, time.monotonic() - start)


def _rate_limited(
    job: ClaimedJob,
    job_type: JobType,
    ctx: JobContext,
    clock: Callable[[], datetime],
    start: float,
) -> Outcome | None:
    """A snooze when the type's rate limit has no room now, else None (room taken)."""
    limit = job_type.rate_limit
    assert limit is not None
    # From this process's allowance: a transaction only when it needs a refill.
    wait = acquire(
        ctx.engine,
        limit.key,
        rate=limit.rate,
        per_seconds=limit.per_seconds,
        burst=limit.burst,
        now=clock(),
    )
    if wait <= 0:
        return None
    return Outcome(
        job,
        Kind.SNOOZED,
        error=f"rate limit {limit.key}",
        delay_seconds=wait,
        duration=time.monotonic() - start,
    )


def _returned(job: ClaimedJob, result: Any, ctx: JobContext, start: float) -> Outcome:
    """The outcome of a handler that returned `result`."""
    if result is not None and inspect.isawaitable(result):
        # A plain function returned a coroutine (a wrapper around an `async def` that
        # hid it): nothing ran. Close it so Python does not warn it was never awaited.
        close = getattr(result, "close", None)
        if close is not None:
            close()
        return Outcome(
            job,
            Kind.PERMANENT,
            error=f"HandlerNotAwaited: the handler of {job.job_type} returned a "
            f"{type(result).__name__} instead of running: register the `async def` itself "
            "(a wrapper must be `async def` too), so the worker awaits it",
            duration=time.monotonic() - start,
        )
    try:
        stored = _json_result(result, ctx.settings.max_payload_bytes)
    except ValidationError as exc:
        # The handler did its work: running it again would repeat its side effects,
        # so the job ends dead with the reason instead of retrying (B12).
        return Outcome(
            job,
            Kind.PERMANENT,
            error=f"ResultNotStorable: the handler finished but its {type(result).__name__} "
            f"result cannot be stored: {exc.field}: {exc.message}",
            duration=time.monotonic() - start,
        )
    return Outcome(job, Kind.SUCCEEDED, result=stored, duration=time.monotonic() - start)


def _raised(job: ClaimedJob, job_type: JobType, exc: BaseException, duration: float) -> Outcome:
    """What the exception a handler (or its rate limit) raised means; never raises."""
    try:
        if isinstance(exc, Snooze):
            delay = capped_delay(exc.seconds, job_type.retry)
            return Outcome(
                job,
                Kind.SNOOZED,
                error=exc.reason or str(exc),
                delay_seconds=delay,
                duration=duration,
            )
        if isinstance(exc, RetryAfter):
            return Outcome(
                job,
                Kind.RETRY_AFTER,
                error=describe_exception(exc),
                delay_seconds=float(exc.seconds),
                duration=duration,
            )
        if isinstance(exc, PermanentError):
            return Outcome(job, Kind.PERMANENT, error=describe_exception(exc), duration=duration)
    except BaseException:  # a subclass that breaks its own contract (no seconds, a bad __str__)
        return Outcome(job, Kind.FAILED, error=describe_exception(exc), duration=duration)
    return Outcome(job, Kind.FAILED, error=describe_exception(exc), duration=duration)


class Attempt:
    """One claimed job on its way through a slot; settled exactly once.

    Its `ctx` is built on first use — by the slot thread that runs it, not by the
    dispatcher that hands a whole claimed batch over (which was a third of the
    dispatcher's per-job CPU, on the path between one claim and the next).
    """

    __slots__ = (
        "_ctx",
        "_engine",
        "_lock",
        "_settings",
        "cancel_grace",
        "cancel_requested",
        "deadline",
        "job",
        "job_type",
        "kept_trace",
        "outcome",
        "started",
        "stop_by",
        "timeout",
    )

    def __init__(
        self,
        job: ClaimedJob,
        job_type: JobType,
        engine: sa.Engine,
        settings: Settings,
        timeout: float,
    ) -> None:
        self.job = job
        self.job_type = job_type
        self.timeout = timeout
        self.started = 0.0
        self.deadline = float("inf")
        #: Set once by `request_cancel`: the monotonic time of the hard stop, and its grace.
        self.cancel_requested = False
        self.stop_by = float("inf")
        self.cancel_grace = 0.0
        self.outcome: Outcome | None = None
        self._engine = engine
        self._settings = settings
        self._ctx: JobContext | None = None
        self._lock = threading.Lock()
        #: With tracing on: the trace context kept at enqueue, read with the claim
        #: (`attach_traces`), handed to the context when it is built.
        self.kept_trace: Any = UNREAD

    @property
    def ctx(self) -> JobContext:
        ctx = self._ctx
        if ctx is None:
            with self._lock:  # one context per attempt, whichever thread asks first
                if self._ctx is None:
                    job = self.job
                    self._ctx = JobContext(
                        job_id=job.id,
                        job_type=job.job_type,
                        attempt=job.attempt,
                        max_attempts=job.max_attempts,
                        idempotency_key=job.idempotency_key,
                        engine=self._engine,
                        settings=self._settings,
                        worker_id=job.worker_id,
                        lease_token=job.lease_token,
                        deadline=None if self.started == 0.0 else self.deadline,
                        cancelled=CancelEvent(),
                    )
                    self._ctx.kept_trace = self.kept_trace
                ctx = self._ctx
        return ctx

    def begin(self) -> bool:
        """Start the attempt's clock; False when it was settled first (released or fenced
        while it waited for a slot): then it must not run. Atomic with `settle`."""
        with self._lock:
            if self.outcome is not None:
                return False
            self.started = time.monotonic()
            self.deadline = min(self.started + self.timeout, self.stop_by)
            if self._ctx is not None:
                self._ctx.deadline = self.deadline
        return True

    def request_cancel(self, grace: float) -> bool:
        """An operator cancelled this job: tell the handler (`ctx.cancelled`) and bring the
        deadline forward to the end of the grace. False when already asked or settled."""
        with self._lock:
            if self.cancel_requested or self.outcome is not None:
                return False
            self.cancel_requested = True
            self.cancel_grace = grace
            self.stop_by = time.monotonic() + grace
            if self.started:
                self.deadline = min(self.deadline, self.stop_by)
        self.ctx.cancelled.set()
        return True

    def stopped_on_request(self, outcome: Outcome) -> Outcome:
        """What the handler's own `outcome` means once a cancel was requested: a success
        stays a success (the work was done); anything else ends the job cancelled."""
        if not self.cancel_requested or outcome.kind in (Kind.SUCCEEDED, Kind.FENCED):
            return outcome
        first = (outcome.error or outcome.kind.value).split("\n", 1)[0]
        return Outcome(
            self.job,
            Kind.CANCELLED,
            error=f"Cancelled: the handler stopped after the cancel request ({first})",
            duration=outcome.duration,
            writes=outcome.writes,
        )

    def settle(self, outcome: Outcome) -> bool:
        """Record `outcome` unless another one got there first; True when this one won."""
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = outcome
        if outcome.kind is not Kind.SUCCEEDED:
            self.ctx.cancelled.set()
        return True

    def finish(self, outcome: Outcome) -> bool:
        """Settle with the handler's own `outcome`; True when it won. When a timeout, a
        hard stop or a lost lease settled the attempt first, the outcome is dropped but
        its `with_outcome` writes are made now, on their own: they record what the
        handler did (a request sent, an effect done), whoever owns the job now."""
        if self.settle(outcome):
            return True
        if outcome.writes:
            try:
                with self._engine.begin() as conn:
                    run_writes(conn, outcome.writes)
            except Exception:
                log.exception(
                    "job %s: the writes of an attempt settled before its handler returned "
                    "could not be made",
                    self.job.id,
                    extra={"action": "late_writes_failed", "job_id": self.job.id},
                )
        return False

    @property
    def settled(self) -> bool:
        return self.outcome is not None

    def time_out(self) -> bool:
        elapsed = time.monotonic() - self.started if self.started else 0.0
        return self.settle(
            Outcome(
                self.job,
                Kind.TIMEOUT,
                error=f"JobTimeout: {self.job.job_type} ran longer than its "
                f"{self.timeout:g}s timeout",
                duration=elapsed,
            )
        )

    def stop_hard(self) -> bool:
        """The grace after a cancel request is over and the handler still runs."""
        elapsed = time.monotonic() - self.started if self.started else 0.0
        return self.settle(
            Outcome(
                self.job,
                Kind.CANCELLED,
                error=f"Cancelled: the handler did not stop within the {self.cancel_grace:g}s "
                "grace after the cancel request and was stopped hard",
                duration=elapsed,
            )
        )

    def cancel_unstarted(self) -> bool:
        """The cancel request came while the job waited for a slot (prefetched): it ends
        cancelled without its handler ever being called."""
        return self.settle(
            Outcome(
                self.job,
                Kind.CANCELLED,
                error="Cancelled before it started: the request came while it waited for a slot",
                duration=0.0,
            )
        )

    def release(self, reason: str = "worker shutting down") -> bool:
        return self.settle(Outcome(self.job, Kind.RELEASED, error=reason))

    def fence(self) -> bool:
        return self.settle(Outcome(self.job, Kind.FENCED, error="lease lost"))


def timeout_for(job: ClaimedJob, job_type: JobType) -> float:
    """The enqueue-time override when given, else the type's hard timeout."""
    return float(job.timeout_seconds or job_type.timeout_seconds)


class CancelEvent(threading.Event):
    """`ctx.cancelled`: a `threading.Event` whose `Condition` is built only when someone
    waits on it. Most handlers never wait (they check `is_set()` or ignore it), and
    building a Condition per claimed job was a tenth of the dispatcher's per-job CPU.

    Every public method is implemented here on one plain lock (the Condition, when there
    is one, shares it), so nothing depends on `threading.Event`'s internals.
    """

    def __init__(self) -> None:  # no super().__init__(): that builds the Condition
        self._flag = False
        self._guard = threading.Lock()
        self._waiters: threading.Condition | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._guard:
            self._flag = True
            if self._waiters is not None:
                self._waiters.notify_all()

    def clear(self) -> None:
        with self._guard:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._guard:
            if self._flag:
                return True
            if self._waiters is None:
                self._waiters = threading.Condition(self._guard)
            self._waiters.wait(timeout)
            return self._flag


def make_attempt(
    job: ClaimedJob, job_type: JobType, engine: sa.Engine, settings: Settings
) -> Attempt:
    return Attempt(job, job_type, engine, settings, timeout_for(job, job_type))
