"""Lease renewal (heartbeats): pushing the lease expiry of jobs a worker still holds.

`renew_leases` answers, for a worker's refs, which leases it renewed and which jobs are
still its own but could not be renewed this time because another transaction holds
their row (`busy`). Everything else in the refs was taken away (the reaper decided the
worker was gone) and is not in either list. The same statement answers which held jobs
an operator asked to cancel (`stopping`), so a worker learns of a cancel request with
its next heartbeat and no query of its own.

On PostgreSQL a renewal never waits for a row lock (the driver's `renew_leases` says
why that matters); on SQLite the heartbeat's transaction is the only writer.

The heartbeat's transaction is bounded (`transaction_bound`): a worker frozen inside it
holds its rows for at most half a lease before the server ends the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import LeaseRenewal
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


def renew_leases(
    conn: sa.Connection, refs: Sequence[JobRef], *, lease_seconds: float, now: datetime
) -> LeaseRenewal:
    """Push the lease of every job in `refs` still held to `now + lease_seconds`."""
    if not refs:
        return LeaseRenewal([], [])
    expires = now + timedelta(seconds=lease_seconds)
    return driver(conn).renew_leases(conn, refs, expires=expires, now=now)
