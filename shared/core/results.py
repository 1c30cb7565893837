"""What became of a job, from the app's side: `job_result` reads it, `wait` blocks until
it is final (`succeeded`, `dead` or `cancelled`).

On PostgreSQL `wait` is woken by the database: it LISTENs on `jobdesk_settled` (a
connection of its own, outside the engine's pool), flags the job `watched`, and the
settle trigger notifies that channel in the transaction that makes the job final — no
polling; it still looks every `NOTIFIED_RECHECK_SECONDS` in case a notification was
lost with a connection. Behind PgBouncer (no LISTEN there) and on SQLite it polls the
job's row — every 50 ms at first, backing off to one second — on a connection it takes
from the engine for each look and gives back in between, so a long wait holds no
connection and no transaction. Its async twin is
`jobdesk.shared.core.results_async.wait_async`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.settle_triggers import SETTLED_CHANNEL
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.notifications import listen_connection, listen_url
from jobdesk.shared.core.states import FINAL, JobStatus

__all__ = ["JobResult", "Waiting", "job_result", "wait"]

FIRST_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 1.0
#: A notified wait looks at the row this often anyway.
NOTIFIED_RECHECK_SECONDS = 5.0


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


class Waiting:
    """The schedule of `wait` and `wait_async`: after each look at the job, how long to
    sleep before the next (50 ms, doubling up to one second) — or that it is over."""

    def __init__(self, job_id: int, timeout: float | None) -> None:
        self.job_id = job_id
        self.limit = check_timeout(timeout)
        self.deadline = time.monotonic() + self.limit
        self.delay = FIRST_POLL_SECONDS

    def after(self, found: JobResult) -> float | None:
        """None when `found` is final; else the seconds to sleep; `TimeoutError` when
        the time is up."""
        if found.final:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"job {self.job_id} is still {found.status.value} after {self.limit:g}s of waiting"
            )
        delay = min(self.delay, left)
        self.delay = min(MAX_POLL_SECONDS, self.delay * 2)
        return delay

    def left(self) -> float:
        """Seconds until the deadline (at least 0)."""
        return max(0.0, self.deadline - time.monotonic())


def wait(engine: sa.Engine, job_id: int, *, timeout: float | None = 30.0) -> JobResult:
    """Block until job `job_id` is final and return its `JobResult`; `TimeoutError`
    after `timeout` seconds (None: no limit), `LookupError` if there is no such job.

    For scripts, tests and request handlers that must answer with a job's outcome;
    a web request should rather enqueue and return (the job runs whatever happens to
    the request)."""
    waiting = Waiting(job_id, timeout)
    with engine.connect() as conn:
        found = job_result(conn, job_id)
    if waiting.after(found) is None:
        return found
    listener = _settled_listener(engine)
    if listener is None:
        while True:
            time.sleep(waiting.after(found) or 0.0)
            with engine.connect() as conn:
                found = job_result(conn, job_id)
            if found.final:
                return found
    with listener:
        with engine.begin() as conn:
            driver(conn).watch_jobs(conn, [job_id])
        while True:
            with engine.connect() as conn:
                found = job_result(conn, job_id)
            if waiting.after(found) is None:
                return found
            wanted = str(job_id)
            for note in listener.notifies(
                timeout=min(NOTIFIED_RECHECK_SECONDS, waiting.left()), stop_after=1000
            ):
                if note.payload == wanted:
                    break


def _settled_listener(engine: sa.Engine) -> psycopg.Connection[Any] | None:
    """A connection listening on the settle channel, where the database can notify."""
    if not driver(engine).listens:
        return None
    url = listen_url(engine, None)
    if url is None:
        return None
    try:
        return listen_connection(url, channel=SETTLED_CHANNEL, application_name="jobdesk-wait")
    except psycopg.Error:
        return None  # polling still answers
