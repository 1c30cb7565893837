"""Checkout liveness of pooled PostgreSQL connections: a dead connection is never handed
out, a live one just returned is handed out without a round trip."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobdesk.shared.core import pool_liveness
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.settings import Settings

pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def one_connection(db_url: str) -> Iterator[sa.Engine]:
    """An engine whose pool keeps a single connection, so checkouts reuse it."""
    engine = make_engine(db_url, settings=Settings(), pool_size=1)
    yield engine
    engine.dispose()


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _last_statement(observer: sa.Engine, pid: int) -> str:
    with observer.connect() as conn:
        return str(
            conn.execute(
                sa.text("SELECT query FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one()
        )


def _terminate(observer: sa.Engine, pid: int) -> None:
    with observer.connect() as conn:
        # Each poll in its own transaction: PostgreSQL keeps one activity snapshot per
        # transaction, so polling inside one would never see the backend go.
        conn.execution_options(isolation_level="AUTOCOMMIT")
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        deadline = time.monotonic() + 10
        while conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        ).scalar_one():
            assert time.monotonic() < deadline, f"backend {pid} did not exit"
            time.sleep(0.02)


def _mark(engine: sa.Engine) -> None:
    """Run a recognisable statement as the connection's last (autocommit: no ROLLBACK
    follows it when the connection goes back to the pool)."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("SELECT 'jobdesk liveness marker'"))


def test_a_connection_returned_a_moment_ago_is_handed_out_without_a_ping(
    one_connection: sa.Engine, engine: sa.Engine
) -> None:
    pid = _backend_pid(one_connection)
    _mark(one_connection)
    with one_connection.connect() as conn:
        # Checked out again: the server saw no statement since the marker.
        assert _last_statement(engine, pid) == "SELECT 'jobdesk liveness marker'"
        assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == pid


def test_a_connection_the_server_ended_in_the_pool_is_replaced_before_use(
    one_connection: sa.Engine, engine: sa.Engine
) -> None:
    pid = _backend_pid(one_connection)
    _terminate(engine, pid)
    with one_connection.connect() as conn:
        # No error reaches the caller: the dead connection was found and replaced.
        assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() != pid


def test_every_connection_pooled_before_a_failed_ping_is_replaced(
    db_url: str, engine: sa.Engine
) -> None:
    pooled = make_engine(db_url, settings=Settings(), pool_size=2)
    try:
        with pooled.connect() as first, pooled.connect() as second:
            pids = {
                int(c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
                for c in (first, second)
            }
        for pid in pids:  # a server restart ends every session at once
            _terminate(engine, pid)
        with pooled.connect() as first, pooled.connect() as second:
            now = {
                int(c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
                for c in (first, second)
            }
        assert not now & pids
    finally:
        pooled.dispose()


def test_a_connection_idle_past_the_limit_is_pinged(
    one_connection: sa.Engine, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = _backend_pid(one_connection)
    _mark(one_connection)
    monkeypatch.setattr(pool_liveness, "PING_AFTER_IDLE_SECONDS", 0.0)
    with one_connection.connect():
        # A silently dropped flow shows nothing on the socket: only a ping can tell.
        assert _last_statement(engine, pid) != "SELECT 'jobdesk liveness marker'"


def test_a_quiet_socket_needs_no_ping_and_a_closed_connection_does(db_url: str) -> None:
    engine = make_engine(db_url, settings=Settings(), pool_size=1)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            assert not pool_liveness.needs_ping(raw, time.monotonic())
            assert pool_liveness.needs_ping(raw, None)  # never seen idle: ask the server
            raw.close()
            assert pool_liveness.needs_ping(raw, time.monotonic())
            conn.invalidate()
    finally:
        engine.dispose()
