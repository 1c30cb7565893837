"""What became of a job, from the app's side: `job_result` reads it, `wait` blocks until
it is final (`succeeded`, `dead` or `cancelled`).

`wait` polls the job's row — every 50 ms at first, backing off to one second — on a
connection it takes from the engine for each look and gives back in between, so a long
wait holds no connection and no transaction. Its async twin is
`jobdesk.shared.core.results_async.wait_async`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import FINAL, JobStatus

__all__ = ["JobResult", "job_result", "next_poll", "wait"]

FIRST_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's status, the result its handler returned (when it succeeded) and the
    error of its last failed attempt (None when there was none)."""

    status: JobStatus
    result: Any
    error: str | None

    @property
    def final(self) -> bool:
        return self.status in FINAL


_READ = sa.select(jobs.c.status, jobs.c.result, jobs.c.last_error)


def job_result(conn: sa.Connection, job_id: int) -> JobResult:
    """The job's status, result and last error; `LookupError` when there is no such job
    (never enqueued, or pruned by retention)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise TypeError(f"job_id must be an int, got {type(job_id).__name__}")
    row = conn.execute(_READ.where(jobs.c.id == job_id)).first()
    if row is None:
        raise LookupError(f"job {job_id} does not exist (never enqueued, or pruned)")
    return JobResult(JobStatus(row.status), row.result, row.last_error)


def check_timeout(timeout: float | None) -> float:
    """`timeout` in seconds (None: wait forever); a clear error for anything else."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise ValueError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if timeout < 0:
        raise ValueError(f"timeout must not be negative, got {timeout!r}")
    return float(timeout)


def next_poll(delay: float) -> float:
    """The delay after `delay`: doubling from 50 ms up to one second."""
    return min(MAX_POLL_SECONDS, delay * 2)


def wait(engine: sa.Engine, job_id: int, *, timeout: float | None = 30.0) -> JobResult:
    """Block until job `job_id` is final and return its `JobResult`; `TimeoutError`
    after `timeout` seconds (None: no limit), `LookupError` if there is no such job.

    For scripts, tests and request handlers that must answer with a job's outcome;
    a web request should rather enqueue and return (the job runs whatever happens to
    the request)."""
    limit = check_timeout(timeout)
    deadline = time.monotonic() + limit
    delay = FIRST_POLL_SECONDS
    while True:
        with engine.connect() as conn:
            found = job_result(conn, job_id)
        if found.final:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"job {job_id} is still {found.status.value} after {limit:g}s of waiting"
            )
        time.sleep(min(delay, left))
        delay = next_poll(delay)
