"""Named leases in the `leases` table: one holder at a time, until it expires.

The `leader` lease elects the one worker process that runs maintenance (reaper,
pruning, alert checks). A holder renews by acquiring again before expiry; when it
dies, the lease runs out and the next caller takes it over. Acquiring is one upsert
whose conflict branch only fires when the lease is free, expired or already ours, so
two candidates can never both win (row lock on PostgreSQL, `BEGIN IMMEDIATE` on SQLite).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import NAME_LENGTH, leases

LEADER = "leader"

_lc = leases.c


@dataclass(frozen=True, slots=True)
class LeaseView:
    name: str
    holder: str
    acquired_at: datetime
    expires_at: datetime

    def valid(self, now: datetime) -> bool:
        return self.expires_at > now


def _check(name: str, holder: str, ttl: timedelta) -> None:
    for label, value in (("lease name", name), ("holder", holder)):
        if not isinstance(value, str) or not value or len(value) > NAME_LENGTH:
            raise ValueError(f"{label} must be 1-{NAME_LENGTH} characters")
    if ttl <= timedelta(0):
        raise ValueError("lease ttl must be positive")


def acquire_lease(
    conn: sa.Connection, name: str, holder: str, *, ttl: timedelta, now: datetime
) -> bool:
    """Take or renew lease `name` for `holder` until `now + ttl`; True when held."""
    _check(name, holder, ttl)
    insert = driver(conn).insert(leases)
    expires = now + ttl
    statement = (
        insert.values(name=name, holder=holder, acquired_at=now, expires_at=expires)
        .on_conflict_do_update(
            index_elements=[_lc.name],
            set_={
                "holder": holder,
                "expires_at": expires,
                # A renewal keeps the original acquisition time; a takeover resets it.
                "acquired_at": sa.case(
                    (_lc.holder == holder, _lc.acquired_at), else_=insert.excluded.acquired_at
                ),
            },
            where=sa.or_(_lc.holder == holder, _lc.expires_at <= now),
        )
        .returning(_lc.holder)
    )
    row = conn.execute(statement).first()
    return row is not None and row.holder == holder


def release_lease(conn: sa.Connection, name: str, holder: str) -> bool:
    """Give lease `name` up if `holder` has it (clean shutdown: no waiting for expiry)."""
    result = conn.execute(sa.delete(leases).where(_lc.name == name, _lc.holder == holder))
    return bool(result.rowcount)


def current_lease(conn: sa.Connection, name: str) -> LeaseView | None:
    """The lease row, valid or expired (check `.valid(now)`), or None."""
    row = conn.execute(sa.select(leases).where(_lc.name == name)).first()
    if row is None:
        return None
    return LeaseView(row.name, row.holder, row.acquired_at, row.expires_at)
