"""Real database faults for tests of a handler's context: PostgreSQL refusing every new
connection to the test database (and ending the handlers' open sessions) for a while."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.settings import Settings
from tests.conftest import PG_ADMIN_URL

#: The application name of the handlers' engine (`jobdesk worker`'s is the same).
HANDLERS_APP = "jobdesk-jobs"


def handler_engine(url: str, settings: Settings) -> sa.Engine:
    """An engine like the worker's handler engine, whose sessions `refusing_connections`
    ends."""
    return make_engine(url, settings=settings, pool_size=2, application_name=HANDLERS_APP)


@contextmanager
def refusing_connections(url: str) -> Iterator[None]:
    """PostgreSQL refuses every new connection to the database of `url`, and the open
    sessions of the handlers' engine are ended, until the block exits."""
    name = sa.make_url(url).database
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :name AND application_name = :app"
            ),
            {"name": name, "app": HANDLERS_APP},
        )
    try:
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
