"""The jobs table's core verbs on SQLite: enqueue, claim, complete, fail, hand back.

The caller's transaction began with `BEGIN IMMEDIATE` (`shared.core.db`), so each verb
runs as the database's only writer: a claim may pick its candidates with a plain
`id IN (subquery)`. Batches are multi-row statements in chunks under the bound-variable
limit; times travel as the fixed-width UTC text the `UTCDateTime` column stores. The
statements use the sqlite3 module's own placeholders, which aiosqlite shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import dump_json
from jobdesk.shared.core.driver.base import (
    PLAIN,
    AttemptRef,
    ClaimBatch,
    ClaimFilter,
    Completion,
    Driver,
    Failure,
    HandBack,
    Inserted,
    JobRow,
    LeaseRenewal,
    Placement,
)
from jobdesk.shared.core.driver.jobs_sql import (
    CANCELLED_OUTCOME,
    CANDIDATE_WHERE,
    CLAIM_COLUMNS,
    CLAIM_SET,
    FAILED_SET,
    HANDED_BACK_SET,
    RUNNING,
    SUCCEEDED_OUTCOME,
    SUCCEEDED_SET,
)
from jobdesk.shared.core.driver.types import SQLITE_TIMESTAMP_FORMAT, utcnow
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus

#: Rows per multi-row statement (well under SQLite's bound-variable limit).
CHUNK = 500
#: Statements kept per shape (a chunk's row count is its shape).
_CACHED_SHAPES = 64


def _time(value: datetime) -> str:
    return value.astimezone(UTC).strftime(SQLITE_TIMESTAMP_FORMAT)


def _cached(cache: dict[Any, Any], key: Any, build: Callable[[Any], Any]) -> Any:
    """`build(key)`, kept in `cache` (statements differ only by their shape)."""
    found = cache.get(key)
    if found is None:
        found = build(key)
        if len(cache) < _CACHED_SHAPES:
            cache[key] = found
    return found


# --- enqueue -------------------------------------------------------------------------

_INSERT_COLUMNS = (
    "job_type, queue, payload, priority, max_attempts, next_run_at, idempotency_key, "
    "group_key, timeout_seconds, concurrency_key, concurrency_limit"
)
_ON_CONFLICT = (
    "ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL"
    " DO NOTHING"
)
# A job without run_at is due at the database clock, like a plain-SQL insert.
_NOW_SQL = str(utcnow().compile(dialect=sqlite.dialect()))
_VALUES = f"(?, ?, ?, ?, ?, COALESCE(?, {_NOW_SQL}), ?, ?, ?, ?, ?)"
_RUN_AT = JobRow._fields.index("run_at")
_inserts: dict[tuple[int, Placement], str] = {}


def _insert_statement(shape: tuple[int, Placement]) -> str:
    """The INSERT of `count` rows placed as `placement` (its values are ints and a
    status name: written into the text, one statement per placement and count)."""
    count, placement = shape
    columns, row_values = _INSERT_COLUMNS, _VALUES
    if placement != PLAIN:
        status = JobStatus.WAITING if placement.waiting else JobStatus.QUEUED
        batch = "NULL" if placement.batch_id is None else str(int(placement.batch_id))
        waiting = "NULL" if placement.waiting_for is None else str(int(placement.waiting_for))
        columns += ", status, batch_id, waiting_for"
        row_values = f"{_VALUES[:-1]}, '{status.value}', {batch}, {waiting})"
    values = ", ".join([row_values] * count)
    return (
        f"INSERT INTO jobdesk_jobs ({columns}) VALUES {values} {_ON_CONFLICT} "
        "RETURNING id, idempotency_key"
    )


# --- claim ---------------------------------------------------------------------------

_PARAMS = {name: f":{name}" for name in ("worker", "now", "lease", "expires")}
_CLAIM = f"""
UPDATE jobdesk_jobs SET {CLAIM_SET.format_map(_PARAMS)}
 WHERE id IN (
       SELECT c.id FROM jobdesk_jobs AS c INDEXED BY {{index}}
        WHERE {CANDIDATE_WHERE.format(now=":now", filters="{filters}")}
        ORDER BY c.priority, c.next_run_at, c.id
        LIMIT :limit)
RETURNING {CLAIM_COLUMNS}, next_run_at
"""
_claims: dict[tuple[int | None, int | None], str] = {}


def _claim_statement(shape: tuple[int | None, int | None]) -> str:
    """The claim for these filters: (queues, job types), each None for no filter or how
    many values (each its own placeholder)."""
    queues, job_types = shape
    filters = ""
    if queues is not None:
        filters += f"\n           AND c.queue IN ({', '.join(f':q{i}' for i in range(queues))})"
    if job_types is not None:
        marks = ", ".join(f":t{i}" for i in range(job_types))
        filters += f"\n           AND c.job_type IN ({marks})"
    # Without planner statistics SQLite would rather fetch every claimable row by status
    # and sort them (30 ms per claim at a 100k backlog, against 0.8 ms walking the
    # claim-order index and stopping at `limit`).
    index = "ix_jobdesk_jobs_claimable_any_queue" if queues is None else "ix_jobdesk_jobs_claimable"
    return _CLAIM.replace("{filters}", filters).replace("{index}", index)


# --- complete ------------------------------------------------------------------------

_completes: dict[int, tuple[str, str]] = {}


def _complete_statements(count: int) -> tuple[str, str]:
    """(UPDATE of `count` jobs, INSERT of `count` attempt rows)."""
    values = ", ".join(["(?, ?, ?)"] * count)
    update = (
        f"WITH batch(id, token, result) AS (VALUES {values}) "
        f"UPDATE jobdesk_jobs SET {SUCCEEDED_SET.format(now='?', result='batch.result')} "
        f"FROM batch WHERE jobdesk_jobs.id = batch.id AND jobdesk_jobs.status = '{RUNNING}' "
        "AND jobdesk_jobs.lease_token = batch.token "
        "RETURNING jobdesk_jobs.id, jobdesk_jobs.attempts, jobdesk_jobs.started_at"
    )
    rows = ", ".join(["(?, ?, ?, ?, ?, ?)"] * count)
    insert = (
        "INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at, "
        f"finished_at, outcome) VALUES {rows}"
    )
    return update, insert


# --- fail ----------------------------------------------------------------------------

# The batch as one JSON text read with json_each; a NULL token (a running row written
# without a lease) matches only NULL (`IS`).
_FAIL = f"""
WITH f(id, token, error, fingerprint, retry_at) AS (
    SELECT json_extract(value, '$.id'), json_extract(value, '$.token'),
           json_extract(value, '$.error'), json_extract(value, '$.fingerprint'),
           json_extract(value, '$.retry_at')
      FROM json_each(:rows)
)
UPDATE jobdesk_jobs SET {FAILED_SET.format(now=":now")}
  FROM f
 WHERE jobdesk_jobs.id = f.id AND jobdesk_jobs.status = '{RUNNING}'
   AND jobdesk_jobs.lease_token IS f.token
RETURNING jobdesk_jobs.id, jobdesk_jobs.status
"""
# --- hand back -----------------------------------------------------------------------

_HAND_BACK = f"""
WITH h(id, token, until) AS (
    SELECT json_extract(value, '$.id'), json_extract(value, '$.token'),
           json_extract(value, '$.until')
      FROM json_each(:rows)
)
UPDATE jobdesk_jobs SET {HANDED_BACK_SET.format(now=":now")}
  FROM h
 WHERE jobdesk_jobs.id = h.id AND jobdesk_jobs.status = '{RUNNING}'
   AND jobdesk_jobs.lease_token = h.token AND jobdesk_jobs.attempts > 0
RETURNING jobdesk_jobs.id, jobdesk_jobs.status
"""
_ATTEMPT_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"
_attempt_inserts: dict[tuple[int, Placement], str] = {}


def _attempts_statement(count: int) -> str:
    return (
        "INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at, "
        f"finished_at, outcome, error, error_fingerprint) VALUES "
        f"{', '.join([_ATTEMPT_ROW] * count)}"
    )


class SQLiteJobs(Driver):
    """The core verbs of `Driver` on SQLite (`SQLiteDriver` adds the rest)."""

    def insert_jobs(
        self, conn: sa.Connection, rows: Sequence[JobRow], placement: Placement = PLAIN
    ) -> Inserted:
        returned: list[tuple[int, str | None]] = []
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            params: list[object] = []
            for row in chunk:
                params += row
                if row.run_at is not None:  # the only datetime: SQLite stores UTC text
                    params[_RUN_AT - len(row)] = _time(row.run_at)
            if placement == PLAIN:
                statement = _cached(_inserts, (len(chunk), PLAIN), _insert_statement)
            else:  # batch ids change from call to call: not worth keeping
                statement = _insert_statement((len(chunk), placement))
            result = conn.exec_driver_sql(statement, tuple(params))
            returned += [(job_id, key) for job_id, key in result.all()]
        unkeyed = sorted(job_id for job_id, key in returned if key is None)
        return Inserted(unkeyed, {key: job_id for job_id, key in returned if key is not None})

    def claim_jobs(
        self,
        conn: sa.Connection,
        *,
        worker_id: str,
        token: int,
        limit: int,
        which: ClaimFilter,
        lease_seconds: float,
        now: datetime | None,
    ) -> ClaimBatch:
        now = now or db_now(conn)
        expires = now + timedelta(seconds=lease_seconds)
        queues, job_types = which
        params: dict[str, Any] = {
            "worker": worker_id,
            "now": _time(now),
            "lease": token,
            "expires": _time(expires),
            "limit": limit,
        }
        for i, name in enumerate(queues or ()):
            params[f"q{i}"] = name
        for i, name in enumerate(job_types or ()):
            params[f"t{i}"] = name
        shape = (
            None if queues is None else len(queues),
            None if job_types is None else len(job_types),
        )
        statement = _cached(_claims, shape, _claim_statement)
        result = list(conn.exec_driver_sql(statement, params))
        # RETURNING order is unspecified: hand jobs out in claim order (the stored times
        # are fixed-width text, so they sort as they compare).
        result.sort(key=lambda r: (r[6], r[10], r[0]))
        return ClaimBatch([tuple(r[:10]) for r in result], now, expires, False)

    def complete_jobs(
        self, conn: sa.Connection, completions: Sequence[Completion], *, now: datetime
    ) -> list[int]:
        done: list[int] = []
        for start in range(0, len(completions), CHUNK):
            done += self._complete_chunk(conn, completions[start : start + CHUNK], now)
        return done

    def _complete_chunk(
        self, conn: sa.Connection, completions: Sequence[Completion], now: datetime
    ) -> list[int]:
        update, _ = _cached(_completes, len(completions), _complete_statements)
        stamp = _time(now)
        params: list[Any] = []
        for item in completions:
            result = None if item.result is None else dump_json(item.result)
            params += (item.ref.id, item.ref.lease_token, result)
        # The CTE's placeholders come first, then the SET clause's two `now`s.
        rows = conn.exec_driver_sql(update, (*params, stamp, stamp)).all()
        if not rows:
            return []
        workers = {c.ref.id: c.ref.worker_id for c in completions}
        _, insert = _cached(_completes, len(rows), _complete_statements)
        values: list[Any] = []
        for job_id, attempts, started_at in rows:
            values += (job_id, attempts, workers[job_id], started_at, stamp, SUCCEEDED_OUTCOME)
        conn.exec_driver_sql(insert, tuple(values))
        return [row[0] for row in rows]

    def renew_leases(
        self, conn: sa.Connection, refs: Sequence[AttemptRef], *, expires: datetime, now: datetime
    ) -> LeaseRenewal:
        # The transaction holds the database's write lock: nothing is ever skipped.
        result = conn.execute(
            sa.update(jobs)
            .where(
                jobs.c.status == RUNNING,
                sa.tuple_(jobs.c.id, jobs.c.lease_token).in_([(r.id, r.lease_token) for r in refs]),
            )
            .values(lease_expires_at=expires, updated_at=now)
            .returning(jobs.c.id, jobs.c.cancel_requested_at)
        )
        rows = result.all()
        stopping = tuple(row.id for row in rows if row.cancel_requested_at is not None)
        return LeaseRenewal([row.id for row in rows], [], stopping)

    def fail_jobs(
        self, conn: sa.Connection, failures: Sequence[Failure], *, now: datetime
    ) -> dict[int, JobStatus]:
        stamp = _time(now)
        batch = [
            {
                "id": f.ref.id,
                "token": f.ref.lease_token,
                "error": f.error,
                "fingerprint": f.fingerprint,
                "retry_at": None if f.retry_at is None else _time(f.retry_at),
            }
            for f in failures
        ]
        written = {
            int(job_id): JobStatus(status)
            for job_id, status in conn.exec_driver_sql(
                _FAIL, {"rows": dump_json(batch), "now": stamp}
            )
        }
        rows: list[Any] = []
        for f in failures:
            status = written.get(f.ref.id)
            if status is None:
                continue
            cancelled = status is JobStatus.CANCELLED
            started = None if f.ref.started_at is None else _time(f.ref.started_at)
            rows.append(
                (
                    f.ref.id,
                    f.ref.attempt,
                    f.ref.worker_id,
                    started,
                    stamp,
                    CANCELLED_OUTCOME if cancelled else f.outcome,
                    f.error,
                    None if cancelled else f.fingerprint,
                )
            )
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            statement = _cached(_attempt_inserts, len(chunk), _attempts_statement)
            conn.exec_driver_sql(statement, tuple(value for row in chunk for value in row))
        return written

    def hand_back_jobs(
        self, conn: sa.Connection, handbacks: Sequence[HandBack], *, now: datetime
    ) -> dict[int, JobStatus]:
        batch = [
            {"id": h.ref.id, "token": h.ref.lease_token, "until": _time(h.until)} for h in handbacks
        ]
        rows = conn.exec_driver_sql(_HAND_BACK, {"rows": dump_json(batch), "now": _time(now)})
        return {int(job_id): JobStatus(status) for job_id, status in rows}
