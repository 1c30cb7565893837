"""Dashboard login rate limiting, shared by every dashboard process through the database.

Failed logins drain three token buckets of the rate-limit table (`limits.rate_limits`,
the same machinery the workers use), each refilling over `WINDOW_SECONDS`:

| bucket                       | failures per 15 min | stops                                 |
|------------------------------|---------------------|---------------------------------------|
| client address + username    | 5                   | guessing one account from one place   |
| client address               | 20                  | one place spraying many usernames     |
| username, from anywhere      | 10                  | a client that changes its address     |

The client address is what the dashboard resolved for the request: the TCP peer, or
behind a trusted proxy the address that proxy forwarded. The per-username bucket holds
even against a client that can make its address change (from behind a trusted proxy,
or with many machines); its price is that someone who knows a username can slow that
account's logins down — for at most the time one token takes to refill (90 s) after
they stop.

Atomic: `attempt_login` takes a token from each bucket inside a SAVEPOINT *before* the
password is checked. The bucket rows stay locked until the transaction ends
(PostgreSQL's upsert takes the row lock; SQLite's write transaction begins IMMEDIATE),
so concurrent attempts on one key queue behind each other and each sees what the
previous one took — 60 simultaneous wrong passwords give 5 x 401 and 55 x 429, in one
process or across many. A correct password rolls the savepoint back (a success costs no
token) and empties the address + username bucket; a refused attempt (some bucket
empty) rolls back too, without checking the password.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.limits.models import rate_limits
from jobdesk.shared.limits.rate_limits import reset_limit, try_acquire
from jobdesk.shared.operator.commands.accounts import (
    OperatorAccount,
    check_credentials,
    record_login,
)

WINDOW_SECONDS = 15 * 60
MAX_FAILURES_PER_ADDRESS_AND_USER = 5
MAX_FAILURES_PER_ADDRESS = 20
MAX_FAILURES_PER_USER = 10
KEY_PREFIX = "login:"


@dataclass(frozen=True, slots=True)
class LoginAttempt:
    """How an attempt ended: the account (logged in), or None with `retry_after` 0
    (wrong username or password) or > 0 (refused unchecked: too many failures)."""

    account: OperatorAccount | None
    retry_after: float = 0.0


def _digest(*parts: str) -> str:
    # Usernames come straight from a form (any length, any character); keys must fit
    # the table and never carry NUL.
    joined = "\x00".join(parts).encode("utf-8", "replace")
    return hashlib.sha256(joined).hexdigest()[:32]


def bucket_keys(address: str, username: str) -> dict[str, int]:
    """Each bucket's key and capacity for an attempt by `username` from `address`.
    Usernames are case-insensitive, so are the buckets: `ANA`, `Ana` and `ana` guess at
    one account and drain one bucket."""
    username = username.lower()
    return {
        f"{KEY_PREFIX}au:{_digest(address, username)}": MAX_FAILURES_PER_ADDRESS_AND_USER,
        f"{KEY_PREFIX}a:{_digest(address)}": MAX_FAILURES_PER_ADDRESS,
        f"{KEY_PREFIX}u:{_digest(username)}": MAX_FAILURES_PER_USER,
    }


def attempt_login(
    conn: sa.Connection, address: str, username: str, password: str, *, now: datetime
) -> LoginAttempt:
    """Check a login under the throttle, in the caller's write transaction."""
    keys = bucket_keys(address, username)
    savepoint = conn.begin_nested()
    try:
        waits = [
            try_acquire(conn, key, rate=limit, per_seconds=WINDOW_SECONDS, burst=limit, now=now)
            for key, limit in keys.items()
        ]
        wait = max(waits)
        if wait > 0:
            savepoint.rollback()
            return LoginAttempt(None, wait)
        account = check_credentials(conn, username, password) if username else None
        if account is None:
            savepoint.commit()
            prune_idle_buckets(conn, now=now)
            return LoginAttempt(None)
        savepoint.rollback()
    except BaseException:
        if savepoint.is_active:
            savepoint.rollback()
        raise
    reset_limit(conn, next(iter(keys)))
    record_login(conn, account, now=now)
    return LoginAttempt(account)


def prune_idle_buckets(conn: sa.Connection, *, now: datetime, limit: int = 1000) -> int:
    """Forget login buckets untouched for a whole window: they are full again, exactly
    as if they did not exist (so a spray of usernames cannot grow the table).

    Rows another attempt holds are skipped (`SKIP LOCKED`), so two failing logins that
    prune at the same time never wait for each other's buckets."""
    idle = (
        sa.select(rate_limits.c.key)
        .where(
            rate_limits.c.key.startswith(KEY_PREFIX, autoescape=True),
            rate_limits.c.updated_at < now - timedelta(seconds=WINDOW_SECONDS),
        )
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    result = conn.execute(sa.delete(rate_limits).where(rate_limits.c.key.in_(idle)))
    return int(result.rowcount or 0)
