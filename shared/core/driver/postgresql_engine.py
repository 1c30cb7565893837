"""PostgreSQL engines: psycopg 3, a sized pool whose connections are checked for
liveness on checkout (`jobdesk.shared.core.pool_liveness`), connect timeout, TCP
keepalives and statement and idle-in-transaction timeouts, so no call can hang forever
when the server or network stalls — set in the startup `options` on a direct
connection, per transaction behind PgBouncer (see `shared.core.db`)."""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from jobdesk.shared.core import pool_liveness
from jobdesk.shared.core.db import dump_json
from jobdesk.shared.settings import Settings, SettingsError

#: A transaction left open this long by a stuck client is ended by the server.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 600_000
#: SQLSTATE of "terminating connection due to idle-in-transaction timeout".
IDLE_SESSION_ENDED = "25P03"
#: Execution option of an engine whose connections go through PgBouncer.
POOLED = "jobdesk_pooled"
#: Execution option of an engine that sets its deadlines per transaction (PgBouncer).
TRANSACTION_DEADLINES = "jobdesk_transaction_deadlines"


def make_postgresql_engine(
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
    event.listen(engine, "handle_error", _lost_session_is_a_disconnect)
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


def _lost_session_is_a_disconnect(context: sa.engine.ExceptionContext) -> BaseException | None:
    """`handle_error` hook: an error that means the server session is gone is raised as
    an `OperationalError` with the connection invalidated, so it is retried like any
    outage and the dead connection leaves the pool. Three such errors arrive as
    something else, which nothing would retry:

    - the server ending a session left idle in a transaction
      (`idle_in_transaction_session_timeout`, SQLSTATE 25P03), an `InternalError`;
    - any error after which psycopg finds its connection broken — behind PgBouncer, a
      COMMIT on a backend the server terminated gets the backend's goodbye and the
      pooler's error, reported as "received 2 results from command 'COMMIT'"
      (`InternalError`). Whether that COMMIT took effect is unknown, as with any
      connection lost during a commit: Jobdesk's writes are fenced (lease token,
      effect keys) so that running them again is safe;
    - a protocol anomaly psycopg reports itself (`_protocol_anomaly`), such as "received
      2 results from command 'BEGIN'" — the connection's state is unknown.
    """
    original = context.original_exception
    ended = getattr(original, "sqlstate", None) == IDLE_SESSION_ENDED
    if not (ended or context.is_disconnect or _protocol_anomaly(original)):
        return None
    if isinstance(context.sqlalchemy_exception, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        context.is_disconnect = True
        return None
    context.is_disconnect = True
    return sa.exc.OperationalError(
        context.statement,
        context.parameters,
        original,
        connection_invalidated=True,
    )


def _protocol_anomaly(error: BaseException) -> bool:
    """An `InternalError` psycopg raised itself (no SQLSTATE: the server sent none) —
    "received 2 results from command 'BEGIN'" and the like: what came back does not
    match what was asked, so nothing more can be trusted on that connection. Behind
    PgBouncer a backend's goodbye can be waiting there when the next BEGIN is sent."""
    return isinstance(error, psycopg.InternalError) and getattr(error, "sqlstate", None) is None


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
        # server (PgBouncer answers `server conn crashed?` after a restart, or a
        # backend's goodbye arrives with the BEGIN: "received 2 results"), and the pool
        # must not hand it out again. Whatever psycopg called it, it is an outage: the
        # statement is Jobdesk's own and cannot fail on anything a caller did.
        connection.invalidate(exc)
        raise sa.exc.OperationalError(sql, None, exc, connection_invalidated=True) from exc


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


def bound_transaction(conn: sa.Connection, seconds: float) -> None:
    """End the current transaction's session if it idles `seconds` (the server ends it
    and releases its locks) and let none of its statements wait longer than that for a
    lock — for this transaction only (`SET LOCAL`, fine behind PgBouncer), whatever the
    engine was configured with."""
    ms = str(max(1, int(seconds * 1000)))
    conn.execute(
        sa.text(
            "SELECT set_config('idle_in_transaction_session_timeout', :ms, true), "
            "set_config('lock_timeout', :ms, true)"
        ),
        {"ms": ms},
    )


def is_pooled(bind: sa.Connection | Engine) -> bool:
    """True when `bind` connects through PgBouncer (`JOBDESK_PGBOUNCER`)."""
    return POOLED in bind.get_execution_options()


def sets_deadlines_per_transaction(bind: sa.Connection | Engine) -> bool:
    """True behind PgBouncer: statements are bounded only inside a transaction."""
    return TRANSACTION_DEADLINES in bind.get_execution_options()
