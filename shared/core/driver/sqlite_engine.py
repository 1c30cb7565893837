"""SQLite engines: WAL (readers never block the writer), a busy timeout, foreign keys
on, and every transaction opened with `BEGIN IMMEDIATE` so a claim takes the write lock
up front — a deferred transaction that later upgrades to a writer can fail with
"database is locked" no matter how long the busy timeout is. Read-only users (the
dashboard) ask for deferred transactions (`begin="DEFERRED"`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from jobdesk.shared.core.db import dump_json

SQLITE_BUSY_TIMEOUT_MS = 10_000


def make_sqlite_engine(url: str, begin: str) -> Engine:
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
