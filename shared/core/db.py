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

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

from jobdesk.shared.core import pool_liveness
from jobdesk.shared.settings import Settings, SettingsError

SQLITE_BUSY_TIMEOUT_MS = 10_000

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


def is_postgresql(bind: sa.Connection | Engine) -> bool:
    return bind.dialect.name == "postgresql"


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
    if parsed.get_backend_name() == "sqlite":
        return _make_sqlite_engine(url, sqlite_begin)
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        idle_ms = IDLE_IN_TRANSACTION_TIMEOUT_MS
        if idle_in_transaction_seconds is not None:
            idle_ms = max(1, int(idle_in_transaction_seconds * 1000))
        return _make_postgresql_engine(
            parsed,
            settings,
            pool_size or settings.db_pool_size,
            application_name,
            index_plans,
            idle_ms,
        )
    raise SettingsError(
        f"JOBDESK_DATABASE_URL: unsupported database {parsed.get_backend_name()!r}; "
        "use sqlite:///path.db or postgresql+psycopg://user@host/db"
    )


def _make_sqlite_engine(url: str, begin: str) -> Engine:
    if begin not in ("IMMEDIATE", "DEFERRED"):
        raise ValueError("sqlite_begin must be IMMEDIATE or DEFERRED")
    engine = sa.create_engine(
        url,
        json_serializer=dump_json,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        pool_pre_ping=False,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN is ours to issue.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        connection.exec_driver_sql(f"BEGIN {begin}")

    return engine


#: A transaction left open this long by a stuck client is ended by the server.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 600_000
#: SQLSTATE of "terminating connection due to idle-in-transaction timeout".
IDLE_SESSION_ENDED = "25P03"
#: Execution option of an engine whose connections go through PgBouncer.
POOLED = "jobdesk_pooled"
#: Execution option of an engine that sets its deadlines per transaction (PgBouncer).
TRANSACTION_DEADLINES = "jobdesk_transaction_deadlines"


def _make_postgresql_engine(
    url: sa.URL,
    settings: Settings,
    pool_size: int,
    application_name: str,
    index_plans: bool,
    idle_ms: int,
) -> Engine:
    statement_timeout_ms = int(settings.db_statement_timeout_seconds * 1000)
    connect_args: dict[str, Any] = {
        "connect_timeout": max(1, int(settings.db_connect_timeout_seconds)),
        "application_name": application_name,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    execution_options: dict[str, Any] = {}
    per_transaction = settings.pgbouncer and not settings.db_timeouts_from_role
    if settings.pgbouncer:
        connect_args["prepare_threshold"] = None
        execution_options[POOLED] = True
    if per_transaction:
        execution_options[TRANSACTION_DEADLINES] = deadlines_sql(
            statement_timeout_ms, index_plans=index_plans, idle_ms=idle_ms
        )
    if not settings.pgbouncer:
        connect_args["options"] = (
            f"-c statement_timeout={statement_timeout_ms}"
            f" -c idle_in_transaction_session_timeout={idle_ms}"
            + (" -c enable_seqscan=off" if index_plans else "")
        )
    engine = sa.create_engine(
        url,
        json_serializer=dump_json,
        pool_size=pool_size,
        max_overflow=max(2, pool_size // 2),
        # Liveness is checked on checkout by `pool_liveness`: a ping only where it can
        # find something, not a round trip before every transaction.
        pool_pre_ping=False,
        pool_recycle=1800,
        pool_timeout=max(settings.db_connect_timeout_seconds, 5.0),
        connect_args=connect_args,
        execution_options=execution_options,
    )
    pool_liveness.install(engine)
    event.listen(engine, "handle_error", _session_ended_is_a_disconnect)
    if per_transaction:
        event.listen(engine, "begin", _set_transaction_deadlines)
    elif settings.pgbouncer:
        event.listen(engine, "connect", _require_role_timeout)
    return engine


def deadlines_sql(
    statement_timeout_ms: int,
    *,
    index_plans: bool = False,
    idle_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
) -> str:
    """One statement setting both timeouts for the current transaction only, and JIT off
    (with `index_plans`, sequential scans off too: see the module).

    Without prepared statements every claim is planned with its parameter values, and
    that plan's cost estimate crosses `jit_above_cost`: PostgreSQL then compiled the
    claim on every execution (91 ms of a 98 ms claim at a 20,000-job backlog). Riding on
    the same statement, turning JIT off costs nothing.
    """
    return (
        f"SELECT set_config('statement_timeout', '{int(statement_timeout_ms)}', true), "
        "set_config('idle_in_transaction_session_timeout', "
        f"'{int(idle_ms)}', true), set_config('jit', 'off', true)"
        + (", set_config('enable_seqscan', 'off', true)" if index_plans else "")
    )


def _session_ended_is_a_disconnect(context: sa.engine.ExceptionContext) -> BaseException | None:
    """`handle_error` hook: the server ending a session left idle in a transaction
    (`idle_in_transaction_session_timeout`, SQLSTATE 25P03) is a lost connection, like
    a terminated backend — psycopg reports it as an `InternalError`, which nothing would
    retry and which would leave the dead connection in the pool. Raised instead as an
    `OperationalError` with the connection invalidated, it is retried like any outage."""
    original = context.original_exception
    if getattr(original, "sqlstate", None) != IDLE_SESSION_ENDED:
        return None
    context.is_disconnect = True
    return sa.exc.OperationalError(
        context.statement,
        context.parameters,
        original,
        connection_invalidated=True,
    )


def bound_transaction(conn: sa.Connection, seconds: float) -> None:
    """PostgreSQL: end the current transaction's session if it idles `seconds` (the
    server ends it and releases its locks) and let none of its statements wait longer
    than that for a lock — for this transaction only (`SET LOCAL`, fine behind
    PgBouncer), whatever the engine was configured with. SQLite: nothing (one writer
    at a time; its busy timeout bounds the waiting)."""
    if not is_postgresql(conn):
        return
    ms = str(max(1, int(seconds * 1000)))
    conn.exec_driver_sql(
        "SELECT set_config('idle_in_transaction_session_timeout', %(ms)s, true), "
        "set_config('lock_timeout', %(ms)s, true)",
        {"ms": ms},
    )


def _set_transaction_deadlines(connection: sa.Connection) -> None:
    """`begin` hook of a PgBouncer engine: bound the transaction that starts now.

    psycopg opens the transaction (BEGIN) with this statement. An autocommit connection
    has no transaction to bound; `one_statement` keeps Jobdesk's own work off them.
    """
    sql = connection.get_execution_options().get(TRANSACTION_DEADLINES)
    driver: Any = connection.connection.driver_connection
    if sql is None or driver.autocommit:
        return
    try:
        driver.execute(sql)
    except psycopg.Error as exc:
        # Raised outside SQLAlchemy's own execution, so nothing would discard the
        # connection: a fresh transaction that cannot even set its timeouts has lost its
        # server (PgBouncer answers `server conn crashed?` after a restart), and the
        # pool must not hand it out again.
        connection.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            sql, None, exc, psycopg.Error, connection_invalidated=True
        ) from exc


def _require_role_timeout(dbapi_connection: Any, _record: Any) -> None:
    """`connect` hook with `JOBDESK_DB_TIMEOUTS_FROM_ROLE`: the deadline is the server's
    default for this role and database, so a connection without one is refused."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SELECT setting::int FROM pg_settings WHERE name = 'statement_timeout'")
        milliseconds = cursor.fetchone()[0]
    dbapi_connection.rollback()
    if not milliseconds:
        dbapi_connection.close()  # the pool never takes it: nothing else would close it
        raise SettingsError(
            "JOBDESK_DB_TIMEOUTS_FROM_ROLE is on but statement_timeout is 0 for this role and "
            "database, so statements would have no deadline: run ALTER ROLE <user> SET "
            "statement_timeout = '30s' (or ALTER DATABASE … SET), or turn the setting off to "
            "set it in every transaction"
        )


def is_pooled(bind: sa.Connection | Engine) -> bool:
    """True when `bind` connects through PgBouncer (`JOBDESK_PGBOUNCER`)."""
    return POOLED in bind.get_execution_options()


def sets_deadlines_per_transaction(bind: sa.Connection | Engine) -> bool:
    """True behind PgBouncer: statements are bounded only inside a transaction."""
    return TRANSACTION_DEADLINES in bind.get_execution_options()


def one_statement(bind: BindT) -> BindT:
    """`bind` for work that is one statement at a time on PostgreSQL: autocommit (the
    statement runs and commits in one round trip, no BEGIN or COMMIT) on a direct
    connection; unchanged behind PgBouncer, where only a transaction carries a deadline."""
    if not is_postgresql(bind) or sets_deadlines_per_transaction(bind):
        return bind
    return bind.execution_options(isolation_level="AUTOCOMMIT")
