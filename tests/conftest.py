"""Fixtures shared by the whole suite.

Every test that takes `engine` (or `conn`) runs twice: on SQLite and on PostgreSQL.

- SQLite: the schema is migrated once into a template file; each test gets a copy.
- PostgreSQL (`JOBDESK_TEST_POSTGRES_URL`, default the local `test` database's server):
  one database per test process (`jobdesk_test_<pid>`), migrated once and emptied before
  each test, so tests may use as many connections and processes as they like. Emptying
  deletes the rows of the tables the last test wrote to and rewinds the sequences it
  advanced: about 7 ms, where a TRUNCATE of all 23 tables took 0.24 s and a fresh clone
  of a template database 0.49 s (the same machine, same run). With `CI=true` an
  unreachable PostgreSQL fails the run; elsewhere those tests are skipped with the reason.
- `postgresql_only` / `sqlite_only` tests are deselected for the other database at
  collection, not skipped at run time; `one_database` tests (view logic: roles,
  headers, forms, rendering) run on SQLite only.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings, known_names
from jobdesk.shared.settings.schema import unknown_names

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
    resetter = _resetters.pop(url, None)
    if resetter is not None:
        resetter.dispose()
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


#: One query naming the tables that hold rows (an EXISTS per table: cheap when empty).
_DIRTY_TABLES = sa.text(
    " UNION ALL ".join(
        f"SELECT '{t.name}' WHERE EXISTS (SELECT 1 FROM \"{t.name}\")"
        for t in metadata.sorted_tables
    )
)
_REWIND_SEQUENCES = sa.text(
    "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, 1, false) "
    "FROM pg_sequences WHERE schemaname = current_schema() AND last_value IS NOT NULL"
)
_resetters: dict[str, sa.Engine] = {}


def _empty_postgresql(url: str) -> None:
    """Delete every row the previous test left and rewind the sequences it used. Triggers
    and foreign keys are off for the deletes (`session_replication_role`, as superuser),
    so the tables go in any order and the counts triggers do not fire; a role that may
    not do that truncates the written tables instead."""
    engine = _resetters.get(url)
    if engine is None:
        engine = _resetters[url] = make_engine(url, pool_size=1)
    with engine.begin() as conn:
        dirty = [row[0] for row in conn.execute(_DIRTY_TABLES)]
        if dirty:
            try:
                with conn.begin_nested():
                    conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
            except sa.exc.ProgrammingError:
                listed = ", ".join(f'"{name}"' for name in dirty)
                conn.execute(sa.text(f"TRUNCATE {listed} RESTART IDENTITY CASCADE"))
            else:
                for name in dirty:
                    conn.execute(sa.text(f'DELETE FROM "{name}"'))
        conn.execute(_REWIND_SEQUENCES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect `postgresql_only` tests on SQLite, `sqlite_only` tests on PostgreSQL, and
    `one_database` tests (view logic the database cannot change) on PostgreSQL."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        marked = item.get_closest_marker
        wrong = (backend == "sqlite" and marked("postgresql_only")) or (
            backend == "postgresql"
            and (
                marked("sqlite_only") or (marked("one_database") and not marked("postgresql_only"))
            )
        )
        (dropped if wrong else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The long tests (worker processes, browsers, demos) first, the quick ones after:
    # xdist hands tests out in this order, so the quick ones fill the gaps instead of a
    # 30-second test starting last and running alone (a tail of minutes).
    kept.sort(key=lambda item: 0 if _is_long(item) else 1)
    items[:] = kept


def _is_long(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None or item.get_closest_marker("e2e") is not None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: three test processes per two cores. The long tests mostly wait — on
    worker subprocesses, leases, a browser — so one process per core leaves the CPU idle
    a quarter of the time. Measured on 2 cores, long tests first, `--dist worksteal`: 2
    processes 8 min 47 s, 3 processes 6 min 35 s, 4 processes 6 min 50 s with a timing
    test (the watchdog's witness writing within its 3 s) failing under the load."""
    return max(1, (os.cpu_count() or 1) * 3 // 2)


#: A statement that writes the jobs table (the driver's verbs are the only writers).
_JOBS_WRITE = re.compile(
    r"^\s*(?:WITH\b.*?)?\b(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+jobdesk_jobs\b",
    re.IGNORECASE | re.DOTALL,
)
_PROJECT = Path(__file__).resolve().parents[1]
_OWN = tuple(f"{_PROJECT / name}{os.sep}" for name in ("shared", "worker", "dashboard", "jobdesk"))
_DRIVER = f"{_PROJECT / 'shared' / 'core' / 'driver'}{os.sep}"
_writes: dict[str, bool] = {}


def _writer_outside_the_driver() -> str | None:
    """The innermost Jobdesk frame of the current statement, when it is not the
    driver's (a test's own plain SQL, like an app's, is fine)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_DRIVER):
            return None
        if name.startswith(_OWN):
            return f"{name}:{frame.f_lineno} ({frame.f_code.co_name})"
        if name.startswith(f"{_PROJECT / 'tests'}{os.sep}"):
            return None
        frame = frame.f_back  # type: ignore[assignment]
    return None


@sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
def _only_the_driver_writes_jobs(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    """Every statement the suite sends: one that writes `jobdesk_jobs` must come from the
    driver (`shared/core/driver/`), as `tests/shared/core/driver/test_seam.py` checks on
    the source."""
    writes = _writes.get(statement)
    if writes is None:
        writes = _writes[statement] = bool(_JOBS_WRITE.search(statement))
    if writes:
        culprit = _writer_outside_the_driver()
        if culprit is not None:
            raise AssertionError(f"jobdesk_jobs written outside the driver, from {culprit}")


@pytest.fixture(autouse=True, scope="session")
def _no_stray_jobdesk_variables() -> Iterator[None]:
    """The suite runs without `JOBDESK_*` variables that are no setting. `enqueue` warns
    about such a name once per process (and warnings are errors here), so one left in a
    developer's shell would fail whichever test enqueues first. Tests of that warning,
    and of the refusals elsewhere, set the names they need themselves."""
    stray = {name: os.environ.pop(name) for name in unknown_names(os.environ, set(known_names()))}
    yield
    os.environ.update(stray)


@pytest.fixture(autouse=True, scope="session")
def _cheap_password_hashes() -> Iterator[None]:
    """Accounts made in this process hash with one PBKDF2 round instead of scrypt: the
    suite creates thousands (0.135 s each at production cost). The production method has
    its own test (`tests/shared/operator/test_accounts.py`)."""
    from jobdesk.shared.operator.commands import accounts

    production = accounts.PASSWORD_HASH_METHOD
    accounts.PASSWORD_HASH_METHOD = "pbkdf2:sha256:1"
    yield
    accounts.PASSWORD_HASH_METHOD = production


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database of the current backend, private to this test."""
    if backend == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        _empty_postgresql(url)
        return url
    template: Path = request.getfixturevalue("sqlite_template")
    target = tmp_path / "jobdesk.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


@pytest.fixture
def empty_db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A brand-new database of the current backend that `jobdesk migrate` never ran on,
    private to this test (on PostgreSQL created on the test server, dropped after)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    request.getfixturevalue("pg_url")  # skips (or fails in CI) without PostgreSQL
    name = f"jobdesk_empty_{os.getpid()}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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
