"""The INSERT behind `enqueue` / `enqueue_many`: validated rows in, job ids out, in order.

This is the hot path of every app request that enqueues, so it is written against the
DB-API through `Connection.exec_driver_sql` (still inside the caller's transaction, with
SQLAlchemy's events and error wrapping) instead of compiling a Core statement per call:

- PostgreSQL: ONE statement per batch whatever its size. The rows travel as a single
  JSONB array parameter (the payloads are embedded as the JSON text validation already
  produced, so nothing is encoded twice), `jsonb_array_elements(...) WITH ORDINALITY`
  turns it into rows inserted in input order, and the same statement calls
  `pg_notify` for the batch's queues, so idle workers wake when (and only when) the
  caller commits. A per-column `unnest` of typed arrays measured half as fast: psycopg
  adapts list elements one by one in Python, whereas one JSON text parses in C.
- SQLite: multi-row `INSERT … VALUES (…), (…) … RETURNING`, in chunks that stay under the
  bound-variable limit.

Ids come back in input order without per-row sentinels: within one statement the id
sequence (PostgreSQL) or rowid (SQLite) grows in insertion order, which the statement
fixes to the input order, so the returned ids of new rows, sorted, line up with the
rows sent. Rows with an idempotency key are matched by key instead, and a key that
already exists (`ON CONFLICT … DO NOTHING` returned nothing for it) is looked up after.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.errors import missing_schema
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.sqltypes import SQLITE_TIMESTAMP_FORMAT, utcnow

NOTIFY_CHANNEL = "jobdesk_jobs"

#: How often a key that conflicted but then could not be found (its job was deleted in
#: between) is inserted again before giving up.
_KEY_RETRIES = 3


class JobRow(NamedTuple):
    """One validated job, ready for the INSERT (field order = column order below)."""

    job_type: str
    queue: str
    payload: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    idempotency_key: str | None
    group_key: str | None
    timeout_seconds: float | None


_COLUMNS = (
    "job_type, queue, payload, priority, max_attempts, next_run_at, idempotency_key, "
    "group_key, timeout_seconds"
)
_ON_CONFLICT = (
    "ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL"
    " DO NOTHING"
)

_POSTGRESQL_INSERT = f"""
WITH ins AS (
    INSERT INTO jobdesk_jobs ({_COLUMNS})
    SELECT r.e->>0, r.e->>1, r.e->2, (r.e->>3)::smallint, (r.e->>4)::integer,
           COALESCE((r.e->>5)::timestamptz, statement_timestamp()),
           r.e->>6, r.e->>7, (r.e->>8)::double precision
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(e, ord)
    ORDER BY r.ord
    {_ON_CONFLICT}
    RETURNING id, idempotency_key
), wake AS (
    SELECT count(pg_notify('{NOTIFY_CHANNEL}', q)) AS n
    FROM unnest(%(queues)s::text[]) AS q
)
SELECT array_agg(ins.id ORDER BY ins.id) FILTER (WHERE ins.idempotency_key IS NULL),
       array_agg(ins.id) FILTER (WHERE ins.idempotency_key IS NOT NULL),
       array_agg(ins.idempotency_key) FILTER (WHERE ins.idempotency_key IS NOT NULL)
FROM ins, wake
"""

# A job without run_at is due at the database clock, like a plain-SQL insert.
_SQLITE_NOW = str(utcnow().compile(dialect=sqlite.dialect()))
_SQLITE_VALUES = f"(?, ?, ?, ?, ?, COALESCE(?, {_SQLITE_NOW}), ?, ?, ?)"
_SQLITE_CHUNK_ROWS = 500
_RUN_AT = JobRow._fields.index("run_at")
_sqlite_statements: dict[int, str] = {}


def insert_rows(conn: sa.Connection, rows: Sequence[JobRow]) -> list[int]:
    """Insert `rows` in the connection's transaction; their ids in input order.

    A row whose idempotency key is taken (by an earlier job, or earlier in this same
    batch) gets the id of the job that holds the key.
    """
    if not rows:
        return []
    fresh: list[JobRow] = []
    first_with_key: dict[str, JobRow] = {}
    for row in rows:
        key = row.idempotency_key
        if key is None:
            fresh.append(row)
        elif key not in first_with_key:
            first_with_key[key] = row
    # Keyed rows go in key order, whatever the input order: two batches that share keys
    # then take the unique index's entries in the same order and one waits for the
    # other instead of deadlocking (B17). Unkeyed rows keep their order (ids line up).
    fresh += [first_with_key[key] for key in sorted(first_with_key)]
    unkeyed_ids, by_key = _insert(conn, fresh)
    missing = [key for key in first_with_key if key not in by_key]
    for _ in range(_KEY_RETRIES):
        if not missing:
            break
        by_key.update(_existing_ids(conn, missing))
        retry = [first_with_key[key] for key in sorted(missing) if key not in by_key]
        if retry:
            # Their holder vanished between the conflict and the lookup (pruned or
            # rolled back): the key is free again, so insert them after all.
            by_key.update(_insert(conn, retry)[1])
        missing = [key for key in missing if key not in by_key]
    if missing:
        raise RuntimeError(f"idempotency keys kept conflicting without a holder: {missing}")
    unkeyed = iter(unkeyed_ids)
    return [
        next(unkeyed) if row.idempotency_key is None else by_key[row.idempotency_key]
        for row in rows
    ]


def _insert(conn: sa.Connection, rows: Sequence[JobRow]) -> tuple[list[int], dict[str, int]]:
    """(ids of the new unkeyed rows in input order, key → id of the new keyed rows)."""
    try:
        return _insert_rows(conn, rows)
    except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
        missing = missing_schema(exc)
        if missing is not None:
            raise missing from exc
        raise


def _insert_rows(conn: sa.Connection, rows: Sequence[JobRow]) -> tuple[list[int], dict[str, int]]:
    if is_postgresql(conn):
        # One row of arrays instead of a row per job: a fraction of the fetch cost.
        unkeyed, keyed_ids, keys = conn.exec_driver_sql(
            _POSTGRESQL_INSERT,
            {"rows": _postgresql_rows(rows), "queues": sorted({row.queue for row in rows})},
        ).one()
        return unkeyed or [], dict(zip(keys or (), keyed_ids or (), strict=True))
    returned: list[tuple[int, str | None]] = []
    for start in range(0, len(rows), _SQLITE_CHUNK_ROWS):
        chunk = rows[start : start + _SQLITE_CHUNK_ROWS]
        params: list[object] = []
        for row in chunk:
            params += row
            if row.run_at is not None:  # the only datetime: SQLite stores UTC text
                params[_RUN_AT - len(row)] = row.run_at.strftime(SQLITE_TIMESTAMP_FORMAT)
        result = conn.exec_driver_sql(_sqlite_statement(len(chunk)), tuple(params))
        returned += [(job_id, key) for job_id, key in result.all()]
    unkeyed = sorted(job_id for job_id, key in returned if key is None)
    return unkeyed, {key: job_id for job_id, key in returned if key is not None}


def _sqlite_statement(count: int) -> str:
    statement = _sqlite_statements.get(count)
    if statement is None:
        values = ", ".join([_SQLITE_VALUES] * count)
        statement = (
            f"INSERT INTO jobdesk_jobs ({_COLUMNS}) VALUES {values} {_ON_CONFLICT} "
            "RETURNING id, idempotency_key"
        )
        if len(_sqlite_statements) < 64:
            _sqlite_statements[count] = statement
    return statement


def _postgresql_rows(rows: Sequence[JobRow]) -> str:
    """The batch as one JSON array of arrays. Names are validated to `[a-z0-9._-]` and
    payloads are already valid JSON text, so only keys and times need encoding."""
    parts = []
    for row in rows:
        run_at = "null" if row.run_at is None else f'"{row.run_at.isoformat()}"'
        key = "null" if row.idempotency_key is None else _json_string(row.idempotency_key)
        group = "null" if row.group_key is None else _json_string(row.group_key)
        timeout = "null" if row.timeout_seconds is None else repr(float(row.timeout_seconds))
        parts.append(
            f'["{row.job_type}","{row.queue}",{row.payload},{row.priority},'
            f"{row.max_attempts},{run_at},{key},{group},{timeout}]"
        )
    return f"[{','.join(parts)}]"


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _existing_ids(conn: sa.Connection, keys: list[str]) -> dict[str, int]:
    """Who holds these keys now (a fresh statement: on PostgreSQL it sees a holder that
    committed while our INSERT waited on it)."""
    found = conn.execute(
        sa.select(jobs.c.idempotency_key, jobs.c.id).where(
            jobs.c.idempotency_key.in_(keys), jobs.c.retried_from_id.is_(None)
        )
    )
    return {row[0]: row[1] for row in found}
