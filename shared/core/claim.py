"""Taking jobs out: `claim` hands a worker due jobs under a lease with a fencing token.

`ClaimedJob` is what a worker holds while it runs a job; `JobRef` is the part every
later write of that attempt needs (the compare-and-set key of `transitions`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core import driver_sql
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.documents import decode_document, not_an_object
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.sqltypes import SQLITE_TIMESTAMP_FORMAT
from jobdesk.shared.core.states import JobStatus

__all__ = ["ClaimedJob", "JobRef", "claim"]


class ClaimedJob(NamedTuple):
    """A job a worker now holds under a lease; `lease_token` fences every later write.

    An immutable record (a NamedTuple: a claim builds hundreds per statement, and a
    frozen dataclass's `__init__` cost 2.2 µs each against 0.3).
    """

    id: int
    job_type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    idempotency_key: str | None
    group_key: str | None
    timeout_seconds: float | None
    lease_token: int
    lease_expires_at: datetime
    started_at: datetime
    worker_id: str

    @property
    def ref(self) -> JobRef:
        return JobRef(self.id, self.lease_token, self.attempt, self.worker_id, self.started_at)


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a worker needs to write the outcome of one attempt (compare-and-set key)."""

    id: int
    lease_token: int
    attempt: int
    worker_id: str
    started_at: datetime | None = None


# The claim is the worker's hot path: its SQL is written out once per shape (which
# filters are present) and sent through `exec_driver_sql`, like `enqueue_sql` does for
# enqueue, instead of compiling a Core statement per call.


def _index_predicate(name: str) -> str:
    """The WHERE of one of the `jobs` partial indexes, as written in the model."""
    (index,) = (i for i in jobs.indexes if i.name == name)
    return str(index.dialect_options["sqlite"]["where"])


# The claim repeats the partial indexes' predicates verbatim (unqualified: they bind to
# the innermost `jobs`): SQLite uses a partial index only for a query whose WHERE has the
# very same term — `status IN ('failed', 'queued')` does not imply an index on
# `status IN ('queued', 'failed')`. A test checks they still name the intended states.
_CLAIMABLE_SQL = _index_predicate("ix_jobdesk_jobs_claimable_any_queue")
_ACTIVE_GROUP_SQL = _index_predicate("ix_jobdesk_jobs_active_group")
_RUNNING = JobStatus.RUNNING.value

# A job with no group, or the head of a group with nothing running: within a group, jobs
# run one at a time in (priority, id) order; a retrying head keeps its place (the group
# waits for it), a dead or cancelled one no longer blocks. `group_key IS NULL` comes
# first so ungrouped candidates never run the subquery (EXPLAIN: "never executed").
_GROUP_IS_FREE = f"""(c.group_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobdesk_jobs AS peer
             WHERE peer.group_key = c.group_key AND {_ACTIVE_GROUP_SQL}
               AND peer.id <> c.id
               AND (peer.status = '{_RUNNING}' OR peer.priority < c.priority
                    OR (peer.priority = c.priority AND peer.id < c.id))))"""

# A paused queue's jobs stay where they are, attempts untouched (`shared.core.queues`).
# `NOT IN` over the tiny (usually empty) pause table: PostgreSQL reads it once into a
# hashed subplan. A correlated `NOT EXISTS` became an anti-join that the planner, with
# every job in one queue and no statistics on the empty pause table, estimated to keep
# no row at all — so LIMIT no longer cut the scan's cost, the claim's estimate went past
# `jit_above_cost`, and every claim spent ~0.5 s compiling JIT code (measured at a 60k
# backlog: 690 ms per claim, 0.6 ms with this form). Both columns are NOT NULL, so
# `NOT IN` has no NULL surprise.
_QUEUE_NOT_PAUSED = """c.queue NOT IN (SELECT qp.queue FROM jobdesk_queue_pauses AS qp)"""

# A row with no attempt left (written by hand or by an old bug) would break the attempts
# CHECK and with it every claim; `attempts < max_attempts` leaves it to the operator.
_CANDIDATE_WHERE = f"""{_CLAIMABLE_SQL} AND c.next_run_at <= {{now}}
           AND c.attempts < c.max_attempts{{filters}}
           AND {_QUEUE_NOT_PAUSED}
           AND {_GROUP_IS_FREE}"""

_CLAIM_SET = f"""status = '{_RUNNING}', attempts = attempts + 1, locked_by = {{worker}},
       locked_at = {{now}}, started_at = {{now}}, lease_token = {{lease}},
       lease_expires_at = {{expires}}, updated_at = {{now}}"""

# Placeholders per driver: psycopg's `%(name)s`, sqlite3's `:name`. On PostgreSQL a
# NULL `now` means the database clock, read by the statement itself (no round trip, and
# exact: a job enqueued just before is never "not yet due" by a clock estimate's error).
_PG_NOW = "COALESCE(%(now)s::timestamptz, statement_timestamp())"
_PG_EXPIRES = (
    "COALESCE(%(expires)s::timestamptz, "
    "statement_timestamp() + make_interval(secs => %(lease_seconds)s))"
)
# For this transaction only (a no-op in autocommit): a sort only where no index order fits.
_NO_SORT = sa.text("SELECT set_config('enable_sort', 'off', true)")
_PG_PARAMS = {"worker": "%(worker)s", "now": _PG_NOW, "lease": "%(lease)s", "expires": _PG_EXPIRES}
_SQLITE_PARAMS = {name: f":{name}" for name in ("worker", "now", "lease", "expires")}

# Returned columns: the first fields of `ClaimedJob`, in its order.
_CLAIM_COLUMNS = (
    "id, job_type, queue, payload, attempts, max_attempts, priority, idempotency_key, "
    "group_key, timeout_seconds"
)

# PostgreSQL: the locking select is an uncorrelated `ARRAY(SELECT …)`, evaluated exactly
# once (a plain `id IN (subquery)` may be re-evaluated and update more than `limit`
# rows), and measured faster and more stable than `IN` or a CTE join. The claimed rows
# come back as ONE JSON text in claim order: one value to fetch and one C-level parse
# (payloads included) instead of a row and a jsonb decode per job.
_POSTGRESQL_CLAIM = f"""
WITH claimed AS (
    UPDATE jobdesk_jobs SET {_CLAIM_SET.format_map(_PG_PARAMS)}
     WHERE id = ANY(ARRAY(
           SELECT c.id FROM jobdesk_jobs AS c
            WHERE {_CANDIDATE_WHERE.format(now=_PG_NOW, filters="{filters}")}
            ORDER BY c.priority, c.next_run_at, c.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED))
    RETURNING {_CLAIM_COLUMNS}, next_run_at
)
SELECT json_agg(json_build_array({_CLAIM_COLUMNS})
                ORDER BY priority, next_run_at, id)::text,
       {_PG_NOW}, {_PG_EXPIRES}
  FROM claimed
"""

# SQLite: the transaction began with `BEGIN IMMEDIATE`, so this is the only writer and
# `UPDATE … WHERE id IN (subquery)` is safe.
_SQLITE_CLAIM = f"""
UPDATE jobdesk_jobs SET {_CLAIM_SET.format_map(_SQLITE_PARAMS)}
 WHERE id IN (
       SELECT c.id FROM jobdesk_jobs AS c INDEXED BY {{index}}
        WHERE {_CANDIDATE_WHERE.format(now=":now", filters="{filters}")}
        ORDER BY c.priority, c.next_run_at, c.id
        LIMIT :limit)
RETURNING {_CLAIM_COLUMNS}, next_run_at
"""

_claim_statements: dict[tuple[bool, int | None, int | None], str] = {}


def _claim_statement(postgresql: bool, queues: int | None, job_types: int | None) -> str:
    """The claim SQL for this dialect and these filters (None: no filter; on SQLite the
    count of values, each its own placeholder)."""
    key = (postgresql, queues, job_types)
    statement = _claim_statements.get(key)
    if statement is not None:
        return statement
    filters = ""
    if postgresql:
        if queues == 1:
            # One queue as an equality, not `= ANY`: then the claim index's own order is
            # the claim order, a plan that needs no sort whatever the statistics say.
            filters += "\n           AND c.queue = %(queue)s"
        elif queues is not None:
            filters += "\n           AND c.queue = ANY(%(queues)s::text[])"
        if job_types is not None:
            filters += "\n           AND c.job_type = ANY(%(job_types)s::text[])"
        statement = _POSTGRESQL_CLAIM.replace("{filters}", filters)
    else:
        if queues is not None:
            marks = ", ".join(f":q{i}" for i in range(queues))
            filters += f"\n           AND c.queue IN ({marks})"
        if job_types is not None:
            marks = ", ".join(f":t{i}" for i in range(job_types))
            filters += f"\n           AND c.job_type IN ({marks})"
        # Without planner statistics SQLite would rather fetch every claimable row by
        # status and sort them (30 ms per claim at a 100k backlog, against 0.8 ms
        # walking the claim-order index and stopping at `limit`).
        index = (
            "ix_jobdesk_jobs_claimable_any_queue" if queues is None else "ix_jobdesk_jobs_claimable"
        )
        statement = _SQLITE_CLAIM.replace("{filters}", filters).replace("{index}", index)
    if len(_claim_statements) < 64:
        _claim_statements[key] = statement
    return statement


def claim(
    conn: sa.Connection,
    *,
    worker_id: str,
    limit: int,
    queues: Sequence[str] | None = None,
    job_types: Sequence[str] | None = None,
    lease_seconds: float = 30.0,
    now: datetime | None = None,
) -> list[ClaimedJob]:
    """Atomically take up to `limit` due jobs, oldest first by (priority, next_run_at, id).

    One statement per dialect (see `_POSTGRESQL_CLAIM` and `_SQLITE_CLAIM`): the
    candidates are picked with `FOR UPDATE SKIP LOCKED` on PostgreSQL, under the
    transaction's write lock on SQLite. The jobs come back in that order. Without `now`
    the database clock decides what is due (on PostgreSQL read by the claim itself).

    `attempts` is incremented here, at claim time, so a job that kills its worker every
    time still runs out of attempts. Only `job_types` this worker knows are taken.

    Give the claim a transaction of its own: on PostgreSQL a claim from every queue
    turns the planner's sorts off until that transaction ends.
    """
    if (
        limit <= 0
        or (queues is not None and not queues)
        or (job_types is not None and not job_types)
    ):
        return []
    token = secrets.randbits(62)
    if is_postgresql(conn):
        params: dict[str, Any] = {
            "worker": worker_id,
            "now": now,
            "lease": token,
            "expires": None if now is None else now + timedelta(seconds=lease_seconds),
            "lease_seconds": float(lease_seconds),
            "limit": limit,
        }
        if queues is not None and len(queues) == 1:
            params["queue"] = queues[0]
        elif queues is not None:
            params["queues"] = list(queues)
        if job_types is not None:
            params["job_types"] = list(job_types)
        statement = _claim_statement(
            True, None if queues is None else min(len(queues), 2), None if job_types is None else 0
        )
        if queues is None:
            # Every queue: the claim order is the any-queue index's order, so that walk is
            # always the plan to have. Statistics taken before a burst (a mostly finished
            # table, a new install) say almost nothing is claimable, which makes sorting
            # the candidates look free: measured at a 20,000 backlog of webhook jobs, 7-11
            # ms per claim sorting all of them against 0.3-0.5 ms walking the index.
            driver_sql.execute(conn, _NO_SORT, {})
        text, started, expires = conn.exec_driver_sql(statement, params).one()
        now, expires = started.astimezone(UTC), expires.astimezone(UTC)
        try:
            rows: list[Any] = json.loads(text) if text else []
        except (RecursionError, ValueError):
            # One payload in the batch cannot be decoded (a plain-SQL row nested
            # thousands of levels deep): decode this claim's rows one by one instead.
            rows = _decode_one_by_one(conn, worker_id, token, now)
        else:
            # jsonb takes any JSON value: a plain-SQL row may hold an array, a string or
            # `null` where a handler expects an object.
            if not all(type(row[3]) is dict for row in rows):
                rows = _without_non_objects(conn, rows, worker_id, token, now)
    else:
        now = now or db_now(conn)
        expires = now + timedelta(seconds=lease_seconds)
        params = {
            "worker": worker_id,
            "now": _sqlite_time(now),
            "lease": token,
            "expires": _sqlite_time(expires),
            "limit": limit,
        }
        for i, name in enumerate(queues or ()):
            params[f"q{i}"] = name
        for i, name in enumerate(job_types or ()):
            params[f"t{i}"] = name
        statement = _claim_statement(
            False,
            None if queues is None else len(queues),
            None if job_types is None else len(job_types),
        )
        result = list(conn.exec_driver_sql(statement, params))
        # RETURNING order is unspecified: hand jobs out in claim order (the stored
        # times are fixed-width text, so they sort as they compare).
        result.sort(key=lambda r: (r[6], r[10], r[0]))
        rows = _decoded(conn, [(*r[:10],) for r in result], worker_id, token, now)
    make, lease = ClaimedJob._make, (token, expires, now, worker_id)
    return [make((*row, *lease)) for row in rows]


def _decode_one_by_one(conn: sa.Connection, worker_id: str, token: int, now: datetime) -> list[Any]:
    """This claim's rows (its token is unique) with each payload decoded on its own."""
    query = (
        sa.select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.queue,
            sa.cast(jobs.c.payload, sa.Text),
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.priority,
            jobs.c.idempotency_key,
            jobs.c.group_key,
            jobs.c.timeout_seconds,
        )
        .where(
            jobs.c.status == JobStatus.RUNNING.value,
            jobs.c.locked_by == worker_id,
            jobs.c.lease_token == token,
        )
        .order_by(jobs.c.priority, jobs.c.next_run_at, jobs.c.id)
    )
    return _decoded(conn, [tuple(row) for row in conn.execute(query)], worker_id, token, now)


def _decoded(
    conn: sa.Connection, raw: list[tuple[Any, ...]], worker_id: str, token: int, now: datetime
) -> list[Any]:
    """Rows with their payload (column 3) decoded; a row whose payload cannot be decoded
    goes `dead` at once, naming the problem, and the rest of the batch runs (B11)."""
    from jobdesk.shared.core.transitions import bury_undecodable  # it imports this module

    rows = []
    for row in raw:
        try:
            payload = json.loads(row[3])
        except (RecursionError, ValueError, TypeError):
            # TypeError: SQLite gives a number stored by plain SQL back as a number.
            payload = None
        if isinstance(payload, dict):
            rows.append((*row[:3], payload, *row[4:10]))
            continue
        decoded = decode_document(row[3])
        problem = decoded.problem or not_an_object(decoded.value)
        bury_undecodable(conn, JobRef(row[0], token, row[4], worker_id, now), problem, now=now)
    return rows


def _without_non_objects(
    conn: sa.Connection, rows: list[Any], worker_id: str, token: int, now: datetime
) -> list[Any]:
    """Decoded rows whose payload is a JSON object; each other one goes `dead` at once,
    naming what it holds, and the rest of the batch runs."""
    from jobdesk.shared.core.transitions import bury_undecodable  # it imports this module

    kept = []
    for row in rows:
        if type(row[3]) is dict:
            kept.append(row)
            continue
        ref = JobRef(row[0], token, row[4], worker_id, now)
        bury_undecodable(conn, ref, not_an_object(row[3]), now=now)
    return kept


def _sqlite_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime(SQLITE_TIMESTAMP_FORMAT)
