"""The INSERT behind `enqueue` / `enqueue_many`: validated rows in, job ids out, in order.

The statement is the driver's (`Driver.insert_jobs`: one statement per batch on
PostgreSQL, multi-row INSERTs in chunks on SQLite, idle workers woken when the caller
commits); this module owns what a batch means to the caller:

Ids come back in input order without per-row sentinels: within one statement the id
sequence (PostgreSQL) or rowid (SQLite) grows in insertion order, which the statement
fixes to the input order, so the returned ids of new rows, sorted, line up with the
rows sent. Rows with an idempotency key are matched by key instead, and a key that
already exists (`ON CONFLICT … DO NOTHING` returned nothing for it) is looked up after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import PLAIN, JobRow, Placement
from jobdesk.shared.core.errors import missing_schema
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.notifications import NOTIFY_CHANNEL

__all__ = ["NOTIFY_CHANNEL", "JobRow", "insert_rows"]

#: How often a key that conflicted but then could not be found (its job was deleted in
#: between) is inserted again before giving up.
_KEY_RETRIES = 3


def insert_rows(conn: sa.Connection, rows: Sequence[JobRow]) -> list[int]:
    """Insert `rows` in the connection's transaction; their ids in input order.

    A row whose idempotency key is taken (by an earlier job, or earlier in this same
    batch) gets the id of the job that holds the key.
    """
    return insert_rows_telling_new(conn, rows)[0]


def insert_rows_telling_new(
    conn: sa.Connection, rows: Sequence[JobRow], placement: Placement = PLAIN
) -> tuple[list[int], set[int]]:
    """`insert_rows`, and which of the ids are jobs this call created (not the holders
    of keys that were taken): what is stored beside a job goes only with those.
    `placement`: the new rows' batch and whether they start waiting."""
    if not rows:
        return [], set()
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
    unkeyed_ids, by_key = _insert(conn, fresh, placement)
    created = {*unkeyed_ids, *by_key.values()}
    missing = [key for key in first_with_key if key not in by_key]
    for _ in range(_KEY_RETRIES):
        if not missing:
            break
        by_key.update(_existing_ids(conn, missing))
        retry = [first_with_key[key] for key in sorted(missing) if key not in by_key]
        if retry:
            # Their holder vanished between the conflict and the lookup (pruned or
            # rolled back): the key is free again, so insert them after all.
            inserted = _insert(conn, retry, placement)[1]
            by_key.update(inserted)
            created.update(inserted.values())
        missing = [key for key in missing if key not in by_key]
    if missing:
        raise RuntimeError(f"idempotency keys kept conflicting without a holder: {missing}")
    unkeyed = iter(unkeyed_ids)
    ids = [
        next(unkeyed) if row.idempotency_key is None else by_key[row.idempotency_key]
        for row in rows
    ]
    return ids, created


def insert_row_with_secrets(conn: sa.Connection, row: JobRow, sealed: Mapping[str, str]) -> int:
    """One job and its sealed secrets (in one statement where the driver can); the id of
    the job holding a taken key otherwise (its own secrets stay)."""
    try:
        inserted = driver(conn).insert_job_with_secrets(conn, row, sealed)
    except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
        missing = missing_schema(exc)
        if missing is not None:
            raise missing from exc
        raise
    if inserted.unkeyed:
        return inserted.unkeyed[0]
    if row.idempotency_key in inserted.by_key:
        return inserted.by_key[row.idempotency_key]
    return insert_rows(conn, [row])[0]  # the key is taken: the holder's id


def _insert(
    conn: sa.Connection, rows: Sequence[JobRow], placement: Placement = PLAIN
) -> tuple[list[int], dict[str, int]]:
    """(ids of the new unkeyed rows in input order, key → id of the new keyed rows)."""
    try:
        return driver(conn).insert_jobs(conn, rows, placement)
    except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
        missing = missing_schema(exc)
        if missing is not None:
            raise missing from exc
        raise


def _existing_ids(conn: sa.Connection, keys: list[str]) -> dict[str, int]:
    """Who holds these keys now (a fresh statement: on PostgreSQL it sees a holder that
    committed while our INSERT waited on it)."""
    found = conn.execute(
        sa.select(jobs.c.idempotency_key, jobs.c.id).where(
            jobs.c.idempotency_key.in_(keys), jobs.c.retried_from_id.is_(None)
        )
    )
    return {row[0]: row[1] for row in found}
