"""Fixtures shared by the whole suite.

Every test that takes `engine` (or `conn`) runs twice: on SQLite and on PostgreSQL.

- SQLite: the schema is migrated once into a template file; each test gets a copy.
- PostgreSQL (`JOBDESK_TEST_POSTGRES_URL`, default the local `test` database's server):
  one database per test process (`jobdesk_test_<pid>`), migrated once and emptied with
  TRUNCATE before each test, so tests may use as many connections and processes as
  they like. With `CI=true` an unreachable PostgreSQL fails the run; elsewhere those
  tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings

DEFAULT_PG_URL = "postgresql+psycopg://root@127.0.0.1:5432/test"
PG_ADMIN_URL = os.environ.get("JOBDESK_TEST_POSTGRES_URL", DEFAULT_PG_URL)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BACKENDS = ["sqlite", "postgresql"]


def _pg_unavailable_reason() -> str | None:
    engine = sa.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        return f"PostgreSQL at {PG_ADMIN_URL} unreachable: {str(exc.orig).splitlines()[0]}"
    finally:
        engine.dispose()
    return None


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a freshly migrated PostgreSQL database owned by this test process."""
    reason = _pg_unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"{reason} (CI requires PostgreSQL)", pytrace=False)
        pytest.skip(reason)
    name = f"jobdesk_test_{os.getpid()}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "jobdesk.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    # Closing the last connection checkpoints the WAL into the main file we copy.
    engine.dispose()
    return path


def _truncate_all(url: str) -> None:
    engine = make_engine(url, pool_size=1)
    tables = ", ".join(f'"{t.name}"' for t in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    for marker, only in (("postgresql_only", "postgresql"), ("sqlite_only", "sqlite")):
        if request.node.get_closest_marker(marker) and name != only:
            pytest.skip(f"{marker}: not applicable to {name}")
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database of the current backend, private to this test."""
    if backend == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        _truncate_all(url)
        return url
    template: Path = request.getfixturevalue("sqlite_template")
    target = tmp_path / "jobdesk.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(db_url, settings=Settings())
    yield engine
    engine.dispose()


@pytest.fixture
def conn(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection; it autobegins a transaction the test commits or rolls back."""
    with engine.connect() as connection:
        yield connection
