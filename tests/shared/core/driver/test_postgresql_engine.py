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
