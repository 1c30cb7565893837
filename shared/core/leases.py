"""Lease renewal (heartbeats): pushing the lease expiry of jobs a worker still holds.

`renew_leases` answers, for a worker's refs, which leases it renewed and which jobs are
still its own but could not be renewed this time because another transaction holds
their row (`busy`). Everything else in the refs was taken away (the reaper decided the
worker was gone) and is not in either list. The same statement answers which held jobs
an operator asked to cancel (`stopping`), so a worker learns of a cancel request with
its next heartbeat and no query of its own.

On PostgreSQL a renewal never waits for a row lock: it takes the rows it can with
`FOR NO KEY UPDATE SKIP LOCKED` and leaves the others (a completion being written, a
handler's progress update) for the next heartbeat. A lease is at least three heartbeats
long, so a row has to stay locked over two heartbeats in a row before its lease is at
risk; a completion holds its rows for milliseconds. Because the heartbeat never waits
on a job row, it can never be one side of a lock cycle with a completion — which is
what lets a completion lock its rows in whatever order its plan visits them, at no cost.

The heartbeat's transaction is bounded (`transaction_bound`): a worker frozen inside it
holds its rows for at most half a lease before the server ends the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus

__all__ = ["LeaseRenewal", "renew_leases", "transaction_bound"]

_RUNNING = JobStatus.RUNNING.value


def transaction_bound(lease_seconds: float) -> float:
    """How long one of the worker's own transactions may sit idle, or wait for a lock,
    before PostgreSQL ends it: half a lease, at least a second.

    A worker frozen inside a transaction (SIGSTOP, a paused VM, an extension holding the
    GIL) keeps the rows it locked until its session ends; the heartbeat locks every job
    its worker holds. With this bound the server ends the frozen session and frees the
    rows within half a lease, so the reaper rescues those jobs when their lease runs
    out and an operator's cancel is applied — instead of both waiting for the server's
    10-minute default."""
    return max(1.0, lease_seconds / 2)


class LeaseRenewal(NamedTuple):
    """What one renewal did: ids whose lease was pushed, ids still held by the caller
    whose row was locked by someone else (not renewed now, not lost either), and ids
    still held that have a cancel request (`cancel_requested_at` set)."""

    renewed: list[int]
    busy: list[int]
    stopping: tuple[int, ...] = ()


# `held`: the refs still running under the caller's token, as of the statement's
# snapshot (a row another transaction is writing shows its last committed version).
# `locked`: those of them whose row lock is free; SKIP LOCKED passes the others over
# without waiting, and the lock re-checks ownership on the newest row version, so a job
# completed or rescued a moment ago is not renewed. All CTEs share one snapshot, so
# `held` is not affected by the UPDATE.
_POSTGRESQL_RENEW = f"""
WITH refs AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS r(id, token)
), held AS (
    SELECT j.id, j.cancel_requested_at IS NOT NULL AS stop
      FROM jobdesk_jobs AS j JOIN refs ON j.id = refs.id
     WHERE j.status = '{_RUNNING}' AND j.lease_token = refs.token
), locked AS (
    SELECT j.id FROM jobdesk_jobs AS j JOIN refs ON j.id = refs.id
     WHERE j.status = '{_RUNNING}' AND j.lease_token = refs.token
       FOR NO KEY UPDATE OF j SKIP LOCKED
), renewed AS (
    UPDATE jobdesk_jobs SET lease_expires_at = %(expires)s, updated_at = %(now)s
     WHERE id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING id
)
SELECT ARRAY(SELECT id FROM renewed), ARRAY(SELECT id FROM held),
       ARRAY(SELECT id FROM held WHERE stop)
"""


def renew_leases(
    conn: sa.Connection, refs: Sequence[JobRef], *, lease_seconds: float, now: datetime
) -> LeaseRenewal:
    """Push the lease of every job in `refs` still held to `now + lease_seconds`."""
    if not refs:
        return LeaseRenewal([], [])
    expires = now + timedelta(seconds=lease_seconds)
    if is_postgresql(conn):
        renewed, held, stopping = conn.exec_driver_sql(
            _POSTGRESQL_RENEW,
            {
                "ids": [ref.id for ref in refs],
                "tokens": [ref.lease_token for ref in refs],
                "expires": expires,
                "now": now,
            },
        ).one()
        done = set(renewed)
        return LeaseRenewal(
            list(renewed), [job_id for job_id in held if job_id not in done], tuple(stopping)
        )
    # SQLite: the transaction holds the database's write lock; nothing is ever skipped.
    result = conn.execute(
        sa.update(jobs)
        .where(
            jobs.c.status == _RUNNING,
            sa.tuple_(jobs.c.id, jobs.c.lease_token).in_([(r.id, r.lease_token) for r in refs]),
        )
        .values(lease_expires_at=expires, updated_at=now)
        .returning(jobs.c.id, jobs.c.cancel_requested_at)
    )
    rows = result.all()
    stopping = tuple(row.id for row in rows if row.cancel_requested_at is not None)
    return LeaseRenewal([row.id for row in rows], [], stopping)
