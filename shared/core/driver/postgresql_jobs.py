"""The jobs table's core verbs on PostgreSQL: enqueue, claim, complete, fail, hand back.

Each is ONE statement per batch whatever its size, and each batch travels as one JSON
text parameter (`jsonb_array_elements` / `jsonb_to_recordset`): one value parsed in C
instead of psycopg adapting list elements one by one in Python (a per-column `unnest`
of typed arrays measured half as fast). Statements are `text()` with bound parameters,
so they run on any SQLAlchemy PostgreSQL driver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.db import autocommits, dump_json
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
    CANCELLED,
    CANCELLED_OUTCOME,
    CANDIDATE_WHERE,
    CLAIM_COLUMNS,
    CLAIM_SET,
    FAILED_SET,
    HANDED_BACK_SET,
    QUEUED,
    RUNNING,
    SUCCEEDED_OUTCOME,
    SUCCEEDED_SET,
)
from jobdesk.shared.core.driver.postgresql_engine import is_pooled
from jobdesk.shared.core.notifications import NOTIFY_CHANNEL
from jobdesk.shared.core.states import JobStatus

# --- enqueue -------------------------------------------------------------------------

_INSERT_COLUMNS = (
    "job_type, queue, payload, priority, max_attempts, next_run_at, idempotency_key, "
    "group_key, timeout_seconds, concurrency_key, concurrency_limit"
)


# Rows go in input order (ORDER BY the ordinality), so the ids of new rows, sorted, line
# up with the rows sent; the same statement notifies the batch's queues, so idle workers
# wake when (and only when) the caller commits. A job without run_at is due at the
# database clock, like a plain-SQL insert.
def _insert_statement(also: str = "", placed: bool = False) -> sa.TextClause:
    """The enqueue INSERT; `also`: more data-modifying CTEs over its new rows (`ins`);
    `placed`: the rows take `:status`, `:batch_id` and `:waiting_for` (a `Placement`)."""
    columns, values = _INSERT_COLUMNS, ""
    if placed:
        columns += ", status, batch_id, waiting_for"
        values = ", :status, CAST(:batch_id AS bigint), CAST(:waiting_for AS integer)"
    return sa.text(
        f"""
WITH ins AS (
    INSERT INTO jobdesk_jobs ({columns})
    SELECT r.e->>0, r.e->>1, r.e->2, (r.e->>3)::smallint, (r.e->>4)::integer,
           COALESCE((r.e->>5)::timestamptz, statement_timestamp()),
           r.e->>6, r.e->>7, (r.e->>8)::double precision, r.e->>9,
           (r.e->>10)::integer{values}
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r(e, ord)
    ORDER BY r.ord
    ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL
    DO NOTHING
    RETURNING id, idempotency_key
){also}, wake AS (
    SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) AS n
    FROM unnest(CAST(:queues AS text[])) AS q
)
SELECT array_agg(ins.id ORDER BY ins.id) FILTER (WHERE ins.idempotency_key IS NULL),
       array_agg(ins.id) FILTER (WHERE ins.idempotency_key IS NOT NULL),
       array_agg(ins.idempotency_key) FILTER (WHERE ins.idempotency_key IS NOT NULL)
FROM ins, wake
"""
    )


_INSERT_JOBS = _insert_statement()
_INSERT_PLACED_JOBS = _insert_statement(placed=True)
#: One job and its sealed secrets in one round trip; a job whose key was taken inserts
#: nothing, and so stores no secrets (the first job keeps its own).
_INSERT_JOB_WITH_SECRETS = _insert_statement(
    """, sealed AS (
    INSERT INTO jobdesk_job_secrets (job_id, name, sealed)
    SELECT ins.id, s.key, s.value FROM ins, jsonb_each_text(CAST(:secrets AS jsonb)) AS s
)"""
)


def _rows_json(rows: Sequence[JobRow]) -> str:
    """The batch as one JSON array of arrays. Names are validated to `[a-z0-9._-]` and
    payloads are already valid JSON text, so only keys and times need encoding."""
    parts = []
    for row in rows:
        run_at = "null" if row.run_at is None else f'"{row.run_at.isoformat()}"'
        key = "null" if row.idempotency_key is None else _json_string(row.idempotency_key)
        group = "null" if row.group_key is None else _json_string(row.group_key)
        timeout = "null" if row.timeout_seconds is None else repr(float(row.timeout_seconds))
        slots = ""
        if row.concurrency_key is not None:
            limit = "null" if row.concurrency_limit is None else int(row.concurrency_limit)
            slots = f",{_json_string(row.concurrency_key)},{limit}"
        parts.append(
            f'["{row.job_type}","{row.queue}",{row.payload},{row.priority},'
            f"{row.max_attempts},{run_at},{key},{group},{timeout}{slots}]"
        )
    return f"[{','.join(parts)}]"


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# --- claim ---------------------------------------------------------------------------

# A NULL `now` means the database clock, read by the statement itself (no round trip,
# and exact: a job enqueued just before is never "not yet due" by a clock estimate's
# error).
_NOW = "COALESCE(CAST(:now AS timestamptz), statement_timestamp())"
_EXPIRES = (
    "COALESCE(CAST(:expires AS timestamptz), "
    "statement_timestamp() + make_interval(secs => :lease_seconds))"
)
_PARAMS = {"worker": ":worker", "now": _NOW, "lease": ":lease", "expires": _EXPIRES}

# The locking select is an uncorrelated `ARRAY(SELECT …)`, evaluated exactly once (a
# plain `id IN (subquery)` may be re-evaluated and update more than `limit` rows), and
# measured faster and more stable than `IN` or a CTE join. The claimed rows come back as
# ONE JSON text in claim order: one value to fetch and one C-level parse (payloads
# included) instead of a row and a jsonb decode per job.
_CLAIM = f"""
WITH claimed AS (
    UPDATE jobdesk_jobs SET {CLAIM_SET.format_map(_PARAMS)}
     WHERE id = ANY(ARRAY(
           SELECT c.id FROM jobdesk_jobs AS c
            WHERE {CANDIDATE_WHERE.format(now=_NOW, filters="{filters}")}
            ORDER BY c.priority, c.next_run_at, c.id
            LIMIT :limit
            FOR UPDATE SKIP LOCKED))
    RETURNING {CLAIM_COLUMNS}, next_run_at
)
SELECT json_agg(json_build_array({CLAIM_COLUMNS})
                ORDER BY priority, next_run_at, id)::text,
       {_NOW}, {_EXPIRES}
  FROM claimed
"""
_FILTERS = {
    # One queue as an equality, not `= ANY`: then the claim index's own order is the
    # claim order, a plan that needs no sort whatever the statistics say.
    "one_queue": "\n           AND c.queue = :queue",
    "queues": "\n           AND c.queue = ANY(CAST(:queues AS text[]))",
    "job_types": "\n           AND c.job_type = ANY(CAST(:job_types AS text[]))",
}
#: The claim per shape: ("" | "one_queue" | "queues", filtered by job type); public
#: for the plan tests.
CLAIM_STATEMENTS = {
    (queues, types): sa.text(
        _CLAIM.replace(
            "{filters}",
            (_FILTERS[queues] if queues else "") + (_FILTERS["job_types"] if types else ""),
        )
    )
    for queues in ("", "one_queue", "queues")
    for types in (False, True)
}
# For this transaction only: a sort only where no index order fits.
NO_SORT = sa.text("SELECT set_config('enable_sort', 'off', true)")
# A claim in autocommit (the worker's claim connection, on a direct connection) has no
# transaction for `NO_SORT` to last in: it would end with its own statement, and the
# claim would be planned with sorts on. That connection runs claims, so it turns sorts
# off for its session instead — once, not per claim — while it claims from every queue
# (a claim from a list of queues needs its sort), and back on before it returns to the
# pool (`end_claim_session`). The session's state is kept in the connection's `info`.
SORTS_OFF = "jobdesk_sorts_off"
SESSION_SORTS_OFF = sa.text("SET enable_sort = off")
SESSION_SORTS_ON = sa.text("RESET enable_sort")
# That connection also runs without JIT, set once for its session and reset the same way.
# A claim filtered by job type (a slot group of `async def` types, say) whose types have
# nothing due walks the whole backlog of the other types; its estimate then passes
# `jit_above_cost` and PostgreSQL compiled the statement every time: 44 ms for a claim
# that found nothing in 3.8 ms, at a 20,000-job backlog (each poll, each wake-up). Behind
# PgBouncer the claim sets nothing on its session (see `_plan_claim`): there JIT is off
# by `deadlines_sql` in each transaction, or by the role's settings.
JIT_OFF = "jobdesk_jit_off"
SESSION_JIT_OFF = sa.text("SET jit = off")
SESSION_JIT_ON = sa.text("RESET jit")

# --- complete ------------------------------------------------------------------------

# The batch travels as ONE JSON text `[[id, lease_token, worker_id, result], …]` (results
# are JSON already). The CTE writes the attempt rows in the same statement, so a batch is
# one round trip. No locking step before the UPDATE: heartbeats, the only other
# multi-row writer of running jobs, skip rows a completion holds (`renew_leases`) and so
# never wait on one. An ordered `FOR NO KEY UPDATE` CTE here cost a join the planner
# turned into a scan of every running row per completed job (80 ms per 1,000; 12 ms
# without it). The batch's jobs are found by primary key (`id = ANY(…)`), whatever else
# is running: the running check compares with a column of the (materialized) batch,
# because with `status = 'running'` written out the planner read every running row of the
# fleet through `ix_jobdesk_jobs_running_lease` and hashed them, once per batch — cheap
# with one worker, O(running jobs) per completion with many.
_NOW_PARAM = "CAST(:now AS timestamptz)"
#: Public for the plan tests (EXPLAIN of a completion).
COMPLETE_JOBS = sa.text(
    f"""
WITH batch AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS worker,
           NULLIF(e->3, 'null'::jsonb) AS result, '{RUNNING}'::varchar AS running
      FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e
), done AS (
    UPDATE jobdesk_jobs SET {SUCCEEDED_SET.format(now=_NOW_PARAM, result="batch.result")}
      FROM batch
     WHERE jobdesk_jobs.id = ANY(ARRAY(SELECT id FROM batch))
       AND jobdesk_jobs.id = batch.id AND jobdesk_jobs.status = batch.running
       AND jobdesk_jobs.lease_token = batch.token
    RETURNING jobdesk_jobs.id, jobdesk_jobs.attempts, jobdesk_jobs.started_at, batch.worker
), attempts AS (
    INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome)
    SELECT id, attempts, worker, started_at, CAST(:now AS timestamptz), '{SUCCEEDED_OUTCOME}'
      FROM done
)
SELECT array_agg(id) FROM done
"""
)

# --- fail ----------------------------------------------------------------------------

# Fenced like every worker write; a NULL token (a running row written without a lease)
# matches only NULL. The attempt rows go in the same statement.
_FAIL = sa.text(
    f"""
WITH f AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS f(
        id bigint, token bigint, attempt integer, worker text, started_at timestamptz,
        error text, fingerprint text, retry_at timestamptz, outcome text)
), done AS (
    UPDATE jobdesk_jobs SET {FAILED_SET.format(now="CAST(:now AS timestamptz)")}
      FROM f
     WHERE jobdesk_jobs.id = ANY(ARRAY(SELECT id FROM f)) AND jobdesk_jobs.id = f.id
       AND jobdesk_jobs.status = '{RUNNING}'
       AND jobdesk_jobs.lease_token IS NOT DISTINCT FROM f.token
    RETURNING jobdesk_jobs.id, jobdesk_jobs.status, f.token
), attempts AS (
    INSERT INTO jobdesk_job_attempts
           (job_id, attempt, worker_id, started_at, finished_at, outcome, error,
            error_fingerprint)
    SELECT f.id, f.attempt, f.worker, f.started_at, CAST(:now AS timestamptz),
           CASE WHEN done.status = '{CANCELLED}' THEN '{CANCELLED_OUTCOME}' ELSE f.outcome END,
           f.error, CASE WHEN done.status = '{CANCELLED}' THEN NULL ELSE f.fingerprint END
      FROM done JOIN f ON f.id = done.id AND f.token IS NOT DISTINCT FROM done.token
)
SELECT id, status FROM done
"""
)


# --- hand back -----------------------------------------------------------------------

# Snoozes and releases of a batch in one statement, fenced like every worker write. A
# busy worker hands back up to a prefetch's worth of jobs at once: one statement per job
# was most of such a worker's time.
# Jobs handed back due now (prefetched jobs a busy worker gives up, releases at shutdown)
# wake the workers of their queues, as an enqueue does: they are handed back for another
# process to start now, which would otherwise find them at its next poll (1 s by
# default). Jobs handed back to a later time (snoozes) wake nobody.
_HAND_BACK = sa.text(
    f"""
WITH h AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS h(
        id bigint, token bigint, until timestamptz)
), back AS (
    UPDATE jobdesk_jobs SET {HANDED_BACK_SET.format(now="CAST(:now AS timestamptz)")}
      FROM h
     WHERE jobdesk_jobs.id = ANY(ARRAY(SELECT id FROM h)) AND jobdesk_jobs.id = h.id
       AND jobdesk_jobs.status = '{RUNNING}' AND jobdesk_jobs.lease_token = h.token
       AND jobdesk_jobs.attempts > 0
    RETURNING jobdesk_jobs.id, jobdesk_jobs.status, jobdesk_jobs.queue,
              jobdesk_jobs.next_run_at
), wake AS (
    SELECT count(pg_notify('{NOTIFY_CHANNEL}', d.queue)) AS n
      FROM (SELECT DISTINCT queue FROM back
             WHERE status = '{QUEUED}' AND next_run_at <= CAST(:now AS timestamptz)) AS d
)
SELECT back.id, back.status FROM back, wake
"""
)


# --- renew ---------------------------------------------------------------------------

# A renewal never waits for a row lock: it takes the rows it can with `FOR NO KEY UPDATE
# SKIP LOCKED` and leaves the others (a completion being written, a handler's progress
# update) for the next heartbeat. A lease is at least three heartbeats long, so a row has
# to stay locked over two heartbeats in a row before its lease is at risk; a completion
# holds its rows for milliseconds. Because the heartbeat never waits on a job row, it can
# never be one side of a lock cycle with a completion — which is what lets a completion
# lock its rows in whatever order its plan visits them, at no cost.
# `held`: the refs still running under the caller's token, as of the statement's
# snapshot (a row another transaction is writing shows its last committed version).
# `locked`: those of them whose row lock is free; the lock re-checks ownership on the
# newest row version, so a job completed or rescued a moment ago is not renewed. All
# CTEs share one snapshot, so `held` is not affected by the UPDATE.
_RENEW = sa.text(
    f"""
WITH refs AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS bigint[])) AS r(id, token)
), held AS (
    SELECT j.id, j.cancel_requested_at IS NOT NULL AS stop
      FROM jobdesk_jobs AS j JOIN refs ON j.id = refs.id
     WHERE j.status = '{RUNNING}' AND j.lease_token = refs.token
), locked AS (
    SELECT j.id FROM jobdesk_jobs AS j JOIN refs ON j.id = refs.id
     WHERE j.status = '{RUNNING}' AND j.lease_token = refs.token
       FOR NO KEY UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE jobdesk_jobs SET lease_expires_at = CAST(:expires AS timestamptz),
           updated_at = CAST(:now AS timestamptz)
     WHERE id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING id
)
SELECT ARRAY(SELECT id FROM renewed), ARRAY(SELECT id FROM held),
       ARRAY(SELECT id FROM held WHERE stop)
"""
)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


class PostgreSQLJobs(Driver):
    """The core verbs of `Driver` on PostgreSQL (`PostgreSQLDriver` adds the rest)."""

    def insert_jobs(
        self, conn: sa.Connection, rows: Sequence[JobRow], placement: Placement = PLAIN
    ) -> Inserted:
        # One row of arrays instead of a row per job: a fraction of the fetch cost.
        params: dict[str, Any] = {
            "rows": _rows_json(rows),
            "queues": [] if placement.waiting else sorted({row.queue for row in rows}),
        }
        statement = _INSERT_JOBS
        if placement != PLAIN:
            statement = _INSERT_PLACED_JOBS
            params["status"] = (JobStatus.WAITING if placement.waiting else JobStatus.QUEUED).value
            params["batch_id"], params["waiting_for"] = placement.batch_id, placement.waiting_for
        unkeyed, keyed_ids, keys = conn.execute(statement, params).one()
        return Inserted(unkeyed or [], dict(zip(keys or (), keyed_ids or (), strict=True)))

    def insert_job_with_secrets(
        self, conn: sa.Connection, row: JobRow, sealed: Mapping[str, str]
    ) -> Inserted:
        unkeyed, keyed_ids, keys = conn.execute(
            _INSERT_JOB_WITH_SECRETS,
            {"rows": _rows_json([row]), "queues": [row.queue], "secrets": json.dumps(sealed)},
        ).one()
        return Inserted(unkeyed or [], dict(zip(keys or (), keyed_ids or (), strict=True)))

    def _plan_claim(self, conn: sa.Connection, *, sorts_off: bool) -> None:
        """A claim from every queue is planned with sorts off: the claim order is the
        any-queue index's order, so that walk is always the plan to have. Statistics
        taken before a burst (a mostly finished table, a new install) say almost nothing
        is claimable, which makes sorting the candidates look free: measured at a 20,000
        backlog of webhook jobs, 7-11 ms per claim sorting all of them against 0.3-0.5 ms
        walking the index. See `SORTS_OFF` (and `JIT_OFF`) for a claim in autocommit."""
        if not autocommits(conn):
            if sorts_off:
                conn.execute(NO_SORT)
            return
        if is_pooled(conn):
            # In autocommit through PgBouncer (`JOBDESK_DB_TIMEOUTS_FROM_ROLE`) a `SET`
            # would land on whichever server connection ran it, and stay there for the
            # clients PgBouncer hands it to next, while the claim itself may run on
            # another: the role's settings decide (docs/production.md).
            return
        info = conn.connection.info
        if info.get(SORTS_OFF, False) != sorts_off:
            conn.execute(SESSION_SORTS_OFF if sorts_off else SESSION_SORTS_ON)
            info[SORTS_OFF] = sorts_off
        if not info.get(JIT_OFF, False):
            conn.execute(SESSION_JIT_OFF)
            info[JIT_OFF] = True

    def equals_any(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        # One statement whatever the list's length (`= ANY` of one array parameter),
        # compiled once and prepared: building an `IN` list's text for every length cost
        # more than the rest of a claimed batch's trace read (19 µs a job at 10 jobs).
        return column == sa.any_(sa.bindparam(name, type_=sa.ARRAY(column.type)))

    def end_claim_session(self, conn: sa.Connection) -> None:
        info = conn.connection.info
        if info.pop(SORTS_OFF, False):
            conn.execute(SESSION_SORTS_ON)
        if info.pop(JIT_OFF, False):
            conn.execute(SESSION_JIT_ON)

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
        params: dict[str, Any] = {
            "worker": worker_id,
            "now": now,
            "lease": token,
            "expires": None if now is None else now + timedelta(seconds=lease_seconds),
            "lease_seconds": float(lease_seconds),
            "limit": limit,
        }
        queues, job_types = which
        shape = ""
        if queues is not None and len(queues) == 1:
            shape, params["queue"] = "one_queue", queues[0]
        elif queues is not None:
            shape, params["queues"] = "queues", list(queues)
        if job_types is not None:
            params["job_types"] = list(job_types)
        self._plan_claim(conn, sorts_off=queues is None)
        text, started, expires = conn.execute(
            CLAIM_STATEMENTS[shape, job_types is not None], params
        ).one()
        started, expires = started.astimezone(UTC), expires.astimezone(UTC)
        try:
            rows: list[Any] = json.loads(text) if text else []
        except (RecursionError, ValueError):
            # One payload in the batch cannot be decoded (a plain-SQL row nested thousands
            # of levels deep): hand the stored texts over, to decode one by one.
            return ClaimBatch(self.claimed_rows(conn, worker_id, token), started, expires, False)
        return ClaimBatch(rows, started, expires, True)

    def complete_jobs(
        self, conn: sa.Connection, completions: Sequence[Completion], *, now: datetime
    ) -> list[int]:
        workers: dict[str, str] = {}
        parts = []
        for item in completions:
            ref = item.ref
            worker = workers.get(ref.worker_id)
            if worker is None:
                worker = workers[ref.worker_id] = _json_string(ref.worker_id)
            result = "null" if item.result is None else dump_json(item.result)
            parts.append(f"[{int(ref.id)},{int(ref.lease_token)},{worker},{result}]")
        ids = conn.execute(COMPLETE_JOBS, {"rows": f"[{','.join(parts)}]", "now": now}).scalar()
        return list(ids or ())

    def renew_leases(
        self, conn: sa.Connection, refs: Sequence[AttemptRef], *, expires: datetime, now: datetime
    ) -> LeaseRenewal:
        renewed, held, stopping = conn.execute(
            _RENEW,
            {
                "ids": [ref.id for ref in refs],
                "tokens": [ref.lease_token for ref in refs],
                "expires": expires,
                "now": now,
            },
        ).one()
        done = set(renewed)
        busy = [job_id for job_id in held if job_id not in done]
        return LeaseRenewal(list(renewed), busy, tuple(stopping))

    def fail_jobs(
        self, conn: sa.Connection, failures: Sequence[Failure], *, now: datetime
    ) -> dict[int, JobStatus]:
        rows = [
            {
                "id": f.ref.id,
                "token": f.ref.lease_token,
                "attempt": f.ref.attempt,
                "worker": f.ref.worker_id,
                "started_at": _time(f.ref.started_at),
                "error": f.error,
                "fingerprint": f.fingerprint,
                "retry_at": _time(f.retry_at),
                "outcome": f.outcome,
            }
            for f in failures
        ]
        result = conn.execute(_FAIL, {"rows": dump_json(rows), "now": now})
        return {int(job_id): JobStatus(status) for job_id, status in result}

    def hand_back_jobs(
        self, conn: sa.Connection, handbacks: Sequence[HandBack], *, now: datetime
    ) -> dict[int, JobStatus]:
        rows = [
            {"id": h.ref.id, "token": h.ref.lease_token, "until": _time(h.until)} for h in handbacks
        ]
        result = conn.execute(_HAND_BACK, {"rows": dump_json(rows), "now": now})
        return {int(job_id): JobStatus(status) for job_id, status in result}
