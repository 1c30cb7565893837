"""Fixtures for running Jobdesk through a real PgBouncer (transaction pooling).

`pgbouncer_available` follows the suite's rule for services: with `CI=true` a missing
`pgbouncer` binary fails the run; elsewhere the tests that need it are skipped with the
reason. Each fixture starts its own pgbouncer process on a free port and stops it after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from tests.conftest import IN_CI, PG_ADMIN_URL
from tests.pgbouncer import PgBouncer, pgbouncer_binary


@pytest.fixture(scope="session")
def pgbouncer_available() -> None:
    if pgbouncer_binary() is None:
        reason = "pgbouncer not installed (apt-get install pgbouncer)"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)


@dataclass(frozen=True)
class BouncedDatabase:
    """A fresh, empty database reachable directly and through PgBouncer."""

    direct_url: str
    bounced_url: str
    bouncer: PgBouncer


def _fresh_database(name: str) -> str:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _drop_database(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def bounced_database(suffix: str, **pool: int) -> Iterator[BouncedDatabase]:
    name = f"jobdesk_pgb_{suffix}_{os.getpid()}"
    direct = _fresh_database(name)
    bouncer = PgBouncer(**pool).start()
    try:
        yield BouncedDatabase(direct, bouncer.url_for(direct), bouncer)
    finally:
        bouncer.stop()
        _drop_database(name)


@pytest.fixture(scope="module")
def bounced(pg_url: str, pgbouncer_available: None) -> Iterator[BouncedDatabase]:
    """An unmigrated database behind a PgBouncer of its own (pool of 20)."""
    yield from bounced_database("main")


@pytest.fixture
def single_server_connection(pg_url: str, pgbouncer_available: None) -> Iterator[BouncedDatabase]:
    """A migrated database behind a PgBouncer whose pool has ONE server connection, so
    every client's transactions run in the same server session, one after the other."""
    from jobdesk.shared.core.db import make_engine
    from jobdesk.shared.migrate import upgrade

    for database in bounced_database("single", default_pool_size=1):
        engine = make_engine(database.direct_url)
        upgrade(engine)
        engine.dispose()
        yield database
