"""Whether a pooled PostgreSQL connection is still alive when it is checked out — asked
of the socket first, of the server only when the socket cannot tell.

A connection can die while it sits in the pool: the server restarted or terminated its
backend (`pg_terminate_backend`, `idle_session_timeout`), PgBouncer went away, or a
firewall forgot an idle flow. Handing out a dead connection fails the caller's first
statement — for a handler, a failed attempt and a retry minutes later. SQLAlchemy's
`pool_pre_ping` guards against that with a `SELECT 1` round trip on *every* checkout;
a webhook delivery checks out twice (preflight, delivery log), and those two pings
were a fifth of its wall time and of the database's work per delivery.

Here the round trip is paid only where it can find something:

- A server that ends a session says so — an error message, then the socket closes — so
  a connection it ended has bytes (or EOF) waiting on its socket, and an idle one has
  none. A zero-timeout `poll()` of the socket costs microseconds; anything waiting
  means ping.
- A connection idle in the pool longer than `PING_AFTER_IDLE_SECONDS` is pinged
  anyway: a flow dropped silently by something on the path shows nothing on the socket.
- A connection the pool opened a moment ago is not pinged (as with `pool_pre_ping`).

A failed ping discards every connection pooled before it (`InvalidatePoolError`, as
SQLAlchemy's own pre-ping does): when the server restarted, they are all dead. Where
`select.poll` is missing (Windows) every checkout pings, as before.
"""

from __future__ import annotations

import select
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

#: A connection idle in the pool this long is pinged even when its socket is quiet.
PING_AFTER_IDLE_SECONDS = 10.0

_IDLE_SINCE = "jobdesk_idle_since"
_CAN_POLL = hasattr(select, "poll")


def install(engine: sa.Engine) -> None:
    """Check liveness on checkout for `engine`'s pool (created with `pool_pre_ping=False`)."""
    dialect = engine.dialect

    def on_connect(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def on_checkin(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def on_checkout(
        dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection
    ) -> None:
        if not needs_ping(dbapi_connection, record.info.get(_IDLE_SINCE)):
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sa.exc.InvalidatePoolError(f"connection failed its ping: {exc}") from exc

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "checkin", on_checkin)
    event.listen(engine, "checkout", on_checkout)


def needs_ping(dbapi_connection: Any, idle_since: float | None) -> bool:
    """Whether a connection idle since `idle_since` (monotonic) must be pinged."""
    if idle_since is None or not _CAN_POLL or getattr(dbapi_connection, "broken", False):
        return True
    if time.monotonic() - idle_since > PING_AFTER_IDLE_SECONDS:
        return True
    return _socket_has_data(dbapi_connection)


def _socket_has_data(dbapi_connection: Any) -> bool:
    """Bytes or EOF waiting on the connection's socket (an idle session has neither)."""
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # closed: libpq no longer has a socket
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
