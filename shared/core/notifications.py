"""PostgreSQL LISTEN for enqueue notifications (`queue.NOTIFY_CHANNEL`, payload = queue).

`enqueue` issues `pg_notify` in the enqueuing transaction, so the notification arrives
when — and only when — the job commits. A worker holds one dedicated autocommit
connection (outside the engine's pool) that listens; every wait is bounded, so a dead
server or network is noticed by keepalives and the caller reconnects. Behind PgBouncer
that connection must go straight to the server (`JOBDESK_LISTEN_URL`).
"""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa

from jobdesk.shared.core.db import is_pooled

#: The channel enqueue notifies (payload: the queue) and idle workers LISTEN on.
NOTIFY_CHANNEL = "jobdesk_jobs"


def listen_url(engine: sa.Engine, configured: str | None) -> sa.URL | None:
    """Where the worker LISTENs: `JOBDESK_LISTEN_URL` when set, else the engine's own
    server — except behind PgBouncer, whose transaction pooling cannot keep a LISTEN
    (the session it runs in serves other clients next): None, the worker polls."""
    if configured:
        return sa.make_url(configured)
    if is_pooled(engine):
        return None
    return engine.url


def listen_connection(
    url: sa.URL,
    *,
    connect_timeout: float = 5.0,
    channel: str = NOTIFY_CHANNEL,
    application_name: str = "jobdesk-listener",
) -> psycopg.Connection[Any]:
    """Open a dedicated connection that listens on `channel` (the enqueue channel)."""
    conn = psycopg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False),
        autocommit=True,
        connect_timeout=max(1, int(connect_timeout)),
        application_name=application_name,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
    )
    try:
        conn.execute(f'LISTEN "{channel}"')
    except BaseException:
        conn.close()
        raise
    return conn


async def listen_connection_async(
    url: sa.URL, *, channel: str, application_name: str, connect_timeout: float = 5.0
) -> psycopg.AsyncConnection[Any]:
    """`listen_connection` for asyncio code (psycopg's async mode, whatever driver the
    app's own engine uses)."""
    conn = await psycopg.AsyncConnection.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False),
        autocommit=True,
        connect_timeout=max(1, int(connect_timeout)),
        application_name=application_name,
    )
    try:
        await conn.execute(f'LISTEN "{channel}"')
    except BaseException:
        await conn.close()
        raise
    return conn


def wait_for_queues(conn: psycopg.Connection[Any], timeout: float) -> list[str]:
    """Queues that received jobs, waiting at most `timeout` seconds for the first one.

    Returns early on the first notification (plus any already delivered with it).
    Raises `psycopg.OperationalError` when the connection is lost.
    """
    queues = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
    if queues:
        queues.extend(n.payload for n in conn.notifies(timeout=0, stop_after=1000))
    return queues
