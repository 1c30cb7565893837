"""The PostgreSQL engine's error hook: what means "this connection can no longer be
trusted" is raised as a retryable `OperationalError` with the connection thrown away.

The lost-COMMIT case runs through a real PgBouncer (`tests/integration/test_pgbouncer.py`);
here psycopg's own protocol-anomaly error is raised at the DBAPI boundary, where psycopg
raises it (a torture run met it at a BEGIN behind PgBouncer)."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.driver.postgresql_engine import TRANSACTION_DEADLINES
from jobdesk.shared.settings import Settings
from jobdesk.worker.resilience import DB_ERRORS

pytestmark = pytest.mark.postgresql_only


def test_a_protocol_anomaly_is_an_outage_and_the_connection_is_replaced(pg_url: str) -> None:
    engine = make_engine(pg_url, settings=Settings(), pool_size=1)
    armed = [True]

    @event.listens_for(engine, "before_cursor_execute")
    def anomaly(*_: object) -> None:
        if armed[0]:
            armed[0] = False
            raise psycopg.InternalError("received 2 results from command 'BEGIN'")

    with (
        pytest.raises(sa.exc.OperationalError, match="received 2 results") as raised,
        engine.begin() as conn,
    ):
        conn.execute(sa.text("SELECT 1"))
    assert raised.value.connection_invalidated
    assert isinstance(raised.value, DB_ERRORS)
    with engine.begin() as conn:  # a fresh connection
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_a_server_error_is_not_taken_for_a_lost_connection(pg_url: str) -> None:
    """An error the server sent (it has a SQLSTATE) stays what it is."""
    engine = make_engine(pg_url, settings=Settings(), pool_size=1)
    with pytest.raises(sa.exc.DBAPIError) as raised, engine.begin() as conn:
        conn.execute(sa.text("SELECT 1/0"))
    assert not isinstance(raised.value, sa.exc.OperationalError)
    assert not raised.value.connection_invalidated
    engine.dispose()


def test_a_transaction_that_cannot_set_its_deadlines_is_an_outage(pg_url: str) -> None:
    """Behind PgBouncer each transaction starts with a statement setting its deadlines
    (run on the driver, outside SQLAlchemy's execution). Whatever error psycopg reports
    there — here the server's own `internal_error`, XX000 — the transaction lost its
    server: a retryable `OperationalError`, the connection thrown away."""
    engine = make_engine(pg_url, settings=Settings(pgbouncer=True), pool_size=1)
    raises = "DO $$ BEGIN RAISE EXCEPTION 'gone' USING ERRCODE = 'XX000'; END $$"
    failing = engine.execution_options(**{TRANSACTION_DEADLINES: raises})
    with pytest.raises(sa.exc.OperationalError, match="gone") as raised, failing.begin():
        pass
    assert raised.value.connection_invalidated
    with engine.begin() as conn:  # the engine's own deadlines, on a fresh connection
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    engine.dispose()
