"""Database access for one request: a read transaction or a write transaction, both
with a statement deadline, and the database clock for actions.

Reads use a deferred transaction on SQLite (they never take the write lock the
workers need); writes begin `IMMEDIATE` like every other writer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import sqlalchemy as sa

from jobdesk.dashboard.state import get_state
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.operator.queries.jobs import statement_deadline


@contextmanager
def read() -> Iterator[sa.Connection]:
    state = get_state()
    with (
        state.read_engine.connect() as conn,
        conn.begin(),
        statement_deadline(conn, state.statement_timeout),
    ):
        yield conn


@contextmanager
def write() -> Iterator[sa.Connection]:
    state = get_state()
    with state.write_engine.begin() as conn, statement_deadline(conn, state.statement_timeout):
        yield conn
    # The operator's own action shows up in the overview's counts at once.
    state.overview_cache.clear()


def now(conn: sa.Connection) -> datetime:
    return db_now(conn)
