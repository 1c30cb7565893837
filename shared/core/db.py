"""Engines for SQLite and PostgreSQL with the settings a job queue needs.

SQLite: WAL (readers never block the writer), a busy timeout, foreign keys on, and every
transaction opened with `BEGIN IMMEDIATE` so a claim takes the write lock up front —
a deferred transaction that later upgrades to a writer can fail with "database is
locked" no matter how long the busy timeout is. Read-only users (the dashboard) can ask
for deferred transactions with `sqlite_begin="DEFERRED"`.

PostgreSQL: psycopg 3, a sized pool whose connections are checked for liveness on
checkout (`jobdesk.shared.core.pool_liveness`), connect timeout, TCP keepalives and a
statement timeout so no call can hang forever when the server or network stalls.

Behind PgBouncer in transaction pooling mode (`JOBDESK_PGBOUNCER`) a server connection
serves one client for one transaction only, so nothing may live in the session: the
timeouts cannot travel as the startup `options` (PgBouncer refuses the parameter) and
are set with `set_config(…, true)` — `SET LOCAL` — at the start of every transaction
instead; psycopg's server-side prepared statements are off (PgBouncer before 1.21 would
hand a statement prepared on one server connection to a client on another). Work that
runs one statement in autocommit on a direct connection runs in a transaction there,
so its deadline holds too (`one_statement`). With `JOBDESK_DB_TIMEOUTS_FROM_ROLE` the
role's or database's own `statement_timeout` (`ALTER ROLE … SET`) bounds every
statement instead, at no cost per transaction; a connection without one is refused.

The worker's own engine (`index_plans=True`: claims, completions, heartbeats,
maintenance) turns sequential scans off for its sessions (`enable_seqscan=off`). Every
one of its statements is an index lookup by design, and a plan built while the jobs
table *looked* empty — the pruner deleted every finished job and vacuum recorded zero
rows, or a new install — is a sequential scan that psycopg's prepared statements keep
reusing: measured, a worker that drained 20,000 jobs at ~20k/s, then saw its table
emptied and vacuumed, claimed the next 100,000 at ~1,050 jobs/s (every claim a scan of
the whole table) until autovacuum's next ANALYZE; with sequential scans off, at full
speed at once. A statement with no index to use still scans (the setting only makes
the planner avoid a scan where another path exists). Handler code's engine keeps the
server's defaults.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from jobdesk.shared.settings import Settings, SettingsError

#: The isolation level of a connection whose statements commit one by one.
AUTOCOMMIT = "AUTOCOMMIT"
BindT = TypeVar("BindT", sa.Connection, Engine)


class SerializedJSON(str):
    """A JSON document already serialised (and validated) by enqueue.

    The engine's JSON serializer passes it through unchanged, so the hot enqueue path
    encodes each payload exactly once.
    """

    __slots__ = ()


def dump_json(value: Any) -> str:
    if isinstance(value, SerializedJSON):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def make_engine(
    url: str | None = None,
    *,
    settings: Settings | None = None,
    sqlite_begin: str = "IMMEDIATE",
    pool_size: int | None = None,
    application_name: str = "jobdesk",
    index_plans: bool = False,
    idle_in_transaction_seconds: float | None = None,
) -> Engine:
    """Create an engine for `url` (default: the configured database URL); `index_plans`
    for the worker's own statements (see the module). `idle_in_transaction_seconds`
    (PostgreSQL): a session that leaves a transaction open and idle this long is ended
    by the server, its locks released — the worker's own engine passes a fraction of
    the lease (`leases.transaction_bound`), so a frozen worker cannot hold job rows
    away from the reaper and operators for longer; the default is 10 minutes."""
    settings = settings or Settings.from_env()
    url = url or settings.database_url
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise SettingsError(
            f"JOBDESK_DATABASE_URL: cannot parse {url!r}; use sqlite:///path.db or "
            "postgresql+psycopg://user@host/db"
        ) from None
    from jobdesk.shared.core.driver import driver_for_url  # the drivers use this module

    try:
        chosen, parsed = driver_for_url(parsed)
    except ValueError as exc:
        raise SettingsError(
            f"JOBDESK_DATABASE_URL: {exc}; use sqlite:///path.db or "
            "postgresql+psycopg://user@host/db"
        ) from None
    return chosen.make_engine(
        parsed,
        settings=settings,
        sqlite_begin=sqlite_begin,
        pool_size=pool_size or settings.db_pool_size,
        application_name=application_name,
        index_plans=index_plans,
        idle_in_transaction_seconds=idle_in_transaction_seconds,
    )


def is_pooled(bind: sa.Connection | Engine) -> bool:
    """True when `bind` connects through PgBouncer (`JOBDESK_PGBOUNCER`)."""
    from jobdesk.shared.core.driver import driver

    return driver(bind).is_pooled(bind)


def sets_deadlines_per_transaction(bind: sa.Connection | Engine) -> bool:
    """True behind PgBouncer: statements are bounded only inside a transaction."""
    from jobdesk.shared.core.driver import driver

    return driver(bind).sets_deadlines_per_transaction(bind)


def bound_transaction(conn: sa.Connection, seconds: float) -> None:
    """Bound the current transaction (see `Driver.bound_transaction`)."""
    from jobdesk.shared.core.driver import driver

    driver(conn).bound_transaction(conn, seconds)


def autocommits(conn: sa.Connection) -> bool:
    """Each statement on `conn` commits on its own (a `one_statement` connection): there
    is no transaction for a local setting to last in, nor one a failure would undo."""
    return bool(conn.get_execution_options().get("isolation_level") == AUTOCOMMIT)


def one_statement(bind: BindT) -> BindT:
    """`bind` for work that is one statement at a time on PostgreSQL: autocommit (the
    statement runs and commits in one round trip, no BEGIN or COMMIT) on a direct
    connection; unchanged behind PgBouncer, where only a transaction carries a deadline,
    and on SQLite."""
    from jobdesk.shared.core.driver import driver

    if driver(bind).autocommits_single_statements(bind):
        return bind.execution_options(isolation_level=AUTOCOMMIT)
    return bind
