"""`drain()`: run due jobs synchronously, in this process, for tests.

It claims, executes and settles jobs through the same code as `jobdesk worker`
(`claim` → `executor.execute` under the hard timeout → `completer.apply_outcomes`), so
retries, `PermanentError`, `RetryAfter`, `Snooze`, rate limits, timeouts, attempt rows
and effects behave exactly as in production — without threads to wait for::

    from jobdesk.worker.testing import drain

    with engine.begin() as conn:
        enqueue(conn, "email.send", {...})
    result = drain(engine)
    assert result.succeeded == 1

Pass `now=` to run with a fixed clock (e.g. an hour ahead, to run retries that are due
then); jobs not due at that time stay where they are.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.clock import DatabaseClock
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.settings import Settings
from jobdesk.worker.async_pool import HARD_STOP_SECONDS
from jobdesk.worker.completer import apply_outcomes
from jobdesk.worker.executor import Attempt, Kind, Outcome, execute, execute_async, make_attempt
from jobdesk.worker.loop_resources import close_loop_resources
from jobdesk.worker.pool import settle_crashed
from jobdesk.worker.registry import Registry
from jobdesk.worker.registry import registry as default_registry

DRAIN_WORKER_ID = "drain"
BATCH_SIZE = 100


@dataclass(frozen=True, slots=True)
class DrainedJob:
    """One attempt run by `drain`: how it ended and the job's status afterwards."""

    id: int
    job_type: str
    attempt: int
    kind: Kind
    status: JobStatus | None
    error: str | None


@dataclass
class DrainResult:
    jobs: list[DrainedJob] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.jobs)

    @property
    def by_kind(self) -> Counter[str]:
        return Counter(job.kind.value for job in self.jobs)

    @property
    def by_status(self) -> Counter[str]:
        return Counter(job.status.value if job.status else "fenced" for job in self.jobs)

    @property
    def succeeded(self) -> int:
        return self.by_kind[Kind.SUCCEEDED.value]

    @property
    def failed(self) -> int:
        """Attempts that ended in an error of any kind (retrying or dead)."""
        kinds = (Kind.FAILED, Kind.RETRY_AFTER, Kind.PERMANENT, Kind.TIMEOUT)
        return sum(self.by_kind[k.value] for k in kinds)

    @property
    def snoozed(self) -> int:
        return self.by_kind[Kind.SNOOZED.value]

    def ids(self, kind: Kind | str | None = None) -> list[int]:
        return [job.id for job in self.jobs if kind is None or job.kind == kind]


def run_with_timeout(attempt: Attempt, clock: Callable[[], datetime]) -> Outcome:
    """Execute `attempt` on a helper thread; settle it as `timeout` if it overruns.

    A handler that never returns is abandoned on its daemon thread (Python cannot kill
    a thread); its eventual result is ignored because the attempt is already settled.
    """
    attempt.begin()

    def body() -> None:
        try:
            if attempt.job_type.is_async:
                asyncio.run(_run_coroutine(attempt, clock))
            else:
                attempt.finish(execute(attempt.job, attempt.job_type, attempt.ctx, clock=clock))
        except BaseException as exc:  # execute() never raises; if it did, like a worker's slot
            settle_crashed(attempt, exc)

    thread = threading.Thread(target=body, name=f"jobdesk-drain-{attempt.job.id}", daemon=True)
    thread.start()
    thread.join(attempt.timeout)
    if thread.is_alive():
        attempt.time_out()
    assert attempt.outcome is not None
    return attempt.outcome


async def _run_coroutine(attempt: Attempt, clock: Callable[[], datetime]) -> None:
    """An `async def` handler on this thread's own event loop: at its timeout the attempt
    is settled and the task cancelled, as the worker does. What the handler opened on the
    loop (HTTP clients) is closed with it."""
    task = asyncio.ensure_future(
        execute_async(attempt.job, attempt.job_type, attempt.ctx, clock=clock)
    )
    try:
        done, _ = await asyncio.wait({task}, timeout=attempt.timeout)
        if done:
            attempt.finish(task.result())
            return
        attempt.time_out()
        task.cancel()
        await asyncio.wait({task}, timeout=HARD_STOP_SECONDS)
    finally:
        await close_loop_resources()


def drain(
    engine: sa.Engine,
    *,
    registry: Registry | None = None,
    queues: Sequence[str] | None = None,
    max_jobs: int | None = None,
    now: datetime | None = None,
    settings: Settings | None = None,
) -> DrainResult:
    """Claim and run due jobs of registered types until none is due (or `max_jobs` ran)."""
    reg = registry or default_registry
    settings = settings or Settings.from_env()
    names = reg.names()
    result = DrainResult()
    if not names:
        return result
    clock: Callable[[], datetime] = (lambda: now) if now is not None else DatabaseClock(engine).now
    snoozed_here: set[int] = set()
    while max_jobs is None or result.count < max_jobs:
        limit = BATCH_SIZE if max_jobs is None else min(BATCH_SIZE, max_jobs - result.count)
        with engine.begin() as conn:
            claimed = claim(
                conn,
                worker_id=DRAIN_WORKER_ID,
                limit=limit,
                queues=queues,
                job_types=names,
                lease_seconds=settings.lease_seconds,
                now=now,
            )
        if not claimed:
            break
        if all(job.id in snoozed_here for job in claimed):
            # Only jobs that already snoozed during this drain: hand them back unrun
            # instead of looping on a zero-second snooze.
            _settle(engine, [_released(job) for job in claimed], clock, reg, result=None)
            break
        outcomes = []
        for job in claimed:
            job_type = reg.get(job.job_type)
            assert job_type is not None  # claim only takes registered types
            outcomes.append(run_with_timeout(make_attempt(job, job_type, engine, settings), clock))
        _settle(engine, outcomes, clock, reg, result=result)
        snoozed_here.update(o.job.id for o in outcomes if o.kind is Kind.SNOOZED)
    return result


def _released(job: ClaimedJob) -> Outcome:
    return Outcome(job, Kind.RELEASED, error="drain stopped")


def _settle(
    engine: sa.Engine,
    outcomes: list[Outcome],
    clock: Callable[[], datetime],
    reg: Registry,
    *,
    result: DrainResult | None,
) -> None:
    now = clock()  # before BEGIN: the clock may need a connection of its own
    with engine.begin() as conn:
        applied = apply_outcomes(conn, outcomes, now=now, policy_for=reg.policy_for)
    if result is None:
        return
    for item in applied:
        job = item.outcome.job
        result.jobs.append(
            DrainedJob(
                job.id,
                job.job_type,
                job.attempt,
                item.outcome.kind,
                item.status,
                item.outcome.error,
            )
        )
