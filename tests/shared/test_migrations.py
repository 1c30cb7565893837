"""Migrations produce exactly the declared schema on both databases (no drift)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import (
    CONTEXT_OPTIONS,
    NO_SCHEMA,
    MigrationError,
    current_revision,
    head_revision,
    is_up_to_date,
    schema_problem,
    upgrade,
)
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings

#: Declared with `ddl_if(dialect="postgresql")`: trigram indexes, the payload search's GIN
#: index and the probe indexes of the kept job counts exist only there.
POSTGRESQL_ONLY_INDEXES = {
    "ix_jobdesk_jobs_last_error_trgm",
    "ix_jobdesk_job_attempts_error_trgm",
    "ix_jobdesk_jobs_dead_unresolved_newest",
    "ix_jobdesk_jobs_payload",
    "ix_jobdesk_jobs_queued_since",
    "ix_jobdesk_jobs_waiting_endpoint",
}


#: Expression indexes on both databases. SQLAlchemy does not reflect them from SQLite
#: (it warns and skips them), so there they are checked in `sqlite_master` instead.
SQLITE_UNREFLECTED_INDEXES = {"uq_jobdesk_operators_username_lower"}


@contextmanager
def expression_indexes_unreflected() -> Iterator[None]:
    """Alembic cannot reflect SQLite's expression indexes and says so for each one the
    metadata declares; the PostgreSQL-only ones are not created there at all."""
    with warnings.catch_warnings():
        for name in POSTGRESQL_ONLY_INDEXES | SQLITE_UNREFLECTED_INDEXES:
            warnings.filterwarnings("ignore", f".*expression-based index '?{name}")
        yield


@pytest.fixture
def empty_engine(empty_db_url: str) -> Iterator[sa.Engine]:
    """An engine on a brand-new, empty database of the current backend."""
    engine = make_engine(empty_db_url, settings=Settings())
    yield engine
    engine.dispose()


def drift(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn, expression_indexes_unreflected():
        context = MigrationContext.configure(conn, opts={"compare_type": True, **CONTEXT_OPTIONS})
        diffs = compare_metadata(context, metadata)
    if engine.dialect.name == "sqlite":
        diffs = [d for d in diffs if not is_unreflected_on_sqlite(d)]
        # What reflection skipped is checked in the schema's own text instead.
        definitions = index_sql(engine)
        for name in SQLITE_UNREFLECTED_INDEXES:
            if name not in definitions:
                diffs.append(("missing_sqlite_index", name))
    return diffs


def is_unreflected_on_sqlite(diff: Any) -> bool:
    return (
        isinstance(diff, tuple)
        and diff[0] == "add_index"
        and diff[1].name in POSTGRESQL_ONLY_INDEXES | SQLITE_UNREFLECTED_INDEXES
    )


def test_upgrading_an_empty_database_yields_exactly_the_declared_schema(
    empty_engine: sa.Engine,
) -> None:
    assert current_revision(empty_engine) is None
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert is_up_to_date(empty_engine)
    assert drift(empty_engine) == []
    tables = set(sa.inspect(empty_engine).get_table_names())
    assert set(metadata.tables) <= tables


def test_upgrade_twice_is_a_no_op(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert drift(empty_engine) == []


def test_partial_indexes_exist_with_their_conditions(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    indexes = {ix["name"]: ix for ix in sa.inspect(empty_engine).get_indexes("jobdesk_jobs")}
    assert {
        "ix_jobdesk_jobs_claimable",
        "uq_jobdesk_jobs_running_group_key",
        "uq_jobdesk_jobs_idempotency_key",
    } <= set(indexes)
    assert indexes["uq_jobdesk_jobs_running_group_key"]["unique"]
    assert indexes["uq_jobdesk_jobs_idempotency_key"]["unique"]
    names = set(indexes)
    if empty_engine.dialect.name == "postgresql":
        assert "ix_jobdesk_jobs_last_error_trgm" in names
        attempt_indexes = {
            ix["name"] for ix in sa.inspect(empty_engine).get_indexes("jobdesk_job_attempts")
        }
        assert "ix_jobdesk_job_attempts_error_trgm" in attempt_indexes
    else:
        assert not names & POSTGRESQL_ONLY_INDEXES


#: Searched only for a value (`=`, `ILIKE`, a foreign key): NULL rows are left out
#: so claims and completions do not add an entry to each per job.
VALUE_ONLY_INDEXES = {
    "ix_jobdesk_jobs_retried_from_id": "retried_from_id is not null",
    "uq_jobdesk_jobs_running_group_key": "group_key is not null",
    "ix_jobdesk_job_attempts_error_fingerprint": "error_fingerprint is not null",
    "ix_jobdesk_jobs_last_error_trgm": "last_error is not null",
    "ix_jobdesk_job_attempts_error_trgm": "error is not null",
}


def index_sql(engine: sa.Engine) -> dict[str, str]:
    """Each index's definition as the database keeps it, lower-cased."""
    query = (
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'jobdesk_%'"
        if engine.dialect.name == "postgresql"
        else "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    )
    with engine.connect() as conn:
        return {name: sql.lower() for name, sql in conn.execute(sa.text(query))}


def test_value_only_indexes_leave_null_rows_out(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    expected = {
        name: predicate
        for name, predicate in VALUE_ONLY_INDEXES.items()
        if empty_engine.dialect.name == "postgresql" or name not in POSTGRESQL_ONLY_INDEXES
    }
    definitions = index_sql(empty_engine)
    for name, predicate in expected.items():
        assert predicate in definitions[name], definitions[name]
    assert "status" in definitions["uq_jobdesk_jobs_running_group_key"]
    assert drift(empty_engine) == []


@pytest.mark.postgresql_only
def test_value_lookups_still_use_the_partial_indexes(empty_engine: sa.Engine) -> None:
    """The planner proves `… IS NOT NULL` from a strict search condition."""
    upgrade(empty_engine)
    searches = {
        "ix_jobdesk_jobs_last_error_trgm": "FROM jobdesk_jobs WHERE last_error ILIKE '%boom%'",
        "ix_jobdesk_job_attempts_error_trgm": (
            "FROM jobdesk_job_attempts WHERE error ILIKE '%boom%'"
        ),
        "ix_jobdesk_jobs_retried_from_id": "FROM jobdesk_jobs WHERE retried_from_id = 7",
        "ix_jobdesk_job_attempts_error_fingerprint": (
            "FROM jobdesk_job_attempts WHERE error_fingerprint = 'abc'"
        ),
    }
    with empty_engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        for index, search in searches.items():
            plan = "\n".join(conn.execute(sa.text(f"EXPLAIN SELECT 1 {search}")).scalars())
            assert index in plan, plan


def test_every_table_and_index_is_namespaced(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    inspector = sa.inspect(empty_engine)
    tables = set(inspector.get_table_names())
    assert tables == {*metadata.tables, "jobdesk_alembic_version"}
    assert all(name.startswith("jobdesk_") for name in tables)
    for table in metadata.tables:
        with expression_indexes_unreflected():
            indexes = inspector.get_indexes(table)
        for index in indexes:
            assert index["name"].startswith(("ix_jobdesk_", "uq_jobdesk_")), index["name"]
    assert all(name.startswith("uq_jobdesk_") for name in SQLITE_UNREFLECTED_INDEXES)


def test_usernames_are_unique_whatever_their_case(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    definition = index_sql(empty_engine)["uq_jobdesk_operators_username_lower"]
    assert "unique" in definition
    assert "lower(" in definition
    insert = (
        "INSERT INTO jobdesk_operators (username, password_hash, role) VALUES (:n, 'x', 'admin')"
    )
    with empty_engine.begin() as conn:
        conn.execute(sa.text(insert), {"n": "ana"})
    with pytest.raises(sa.exc.IntegrityError), empty_engine.begin() as conn:
        conn.execute(sa.text(insert), {"n": "Ana"})


@pytest.mark.slow
def test_accounts_differing_only_by_case_stop_the_migration_by_name(
    empty_engine: sa.Engine,
) -> None:
    upgrade(empty_engine, "jobdesk_0001")
    insert = (
        "INSERT INTO jobdesk_operators (username, password_hash, role) VALUES (:n, 'x', 'admin')"
    )
    with empty_engine.begin() as conn:
        for name in ("ana", "Ana", "bob", "ANA", "Carl", "carl"):
            conn.execute(sa.text(insert), {"n": name})
    with pytest.raises(MigrationError) as failure:
        upgrade(empty_engine)
    message = str(failure.value)
    assert "ANA, Ana, ana, Carl, carl" in message
    assert "bob" not in message
    assert "\n" not in message
    assert current_revision(empty_engine) == "jobdesk_0001"
    # Once one of each is left, the migration goes through.
    with empty_engine.begin() as conn:
        conn.execute(
            sa.text("DELETE FROM jobdesk_operators WHERE username IN ('Ana', 'ANA', 'Carl')")
        )
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert drift(empty_engine) == []


APP_SCHEMA = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "INSERT INTO alembic_version VALUES ('12b684f79665')",
    "CREATE TABLE users (id INTEGER PRIMARY KEY, email VARCHAR(200))",
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, title VARCHAR(200))",
    "CREATE TABLE alerts (id INTEGER PRIMARY KEY, body TEXT)",
    "CREATE TABLE workers (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE INDEX ix_jobs_title ON jobs (title)",
    "INSERT INTO users VALUES (1, 'ana@example.com')",
    "INSERT INTO jobs VALUES (7, 'plumber')",
)


def _app_snapshot(engine: sa.Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {
            name: (
                [c["name"] for c in inspector.get_columns(name)],
                sorted(ix["name"] for ix in inspector.get_indexes(name)),
                sorted(map(tuple, conn.execute(sa.text(f"SELECT * FROM {name}")))),
            )
            for name in ("alembic_version", "users", "jobs", "alerts", "workers")
        }


@pytest.mark.slow
def test_migrate_beside_an_apps_own_history_and_tables_leaves_them_untouched(
    empty_engine: sa.Engine,
) -> None:
    with empty_engine.begin() as conn:
        for statement in APP_SCHEMA:
            conn.execute(sa.text(statement))
    before = _app_snapshot(empty_engine)
    upgrade(empty_engine)
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert drift(empty_engine) == []
    assert _app_snapshot(empty_engine) == before
    with empty_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == (
            "12b684f79665"
        )


def test_a_revision_from_a_newer_jobdesk_is_one_clear_line(empty_engine: sa.Engine) -> None:
    upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobdesk_alembic_version SET version_num = 'jobdesk_0099'"))
    with pytest.raises(MigrationError) as failure:
        upgrade(empty_engine)
    message = str(failure.value)
    assert "\n" not in message
    assert "'jobdesk_0099'" in message
    assert "newer Jobdesk" in message


def test_schema_problem_names_what_to_run_and_lets_a_newer_schema_be(
    empty_engine: sa.Engine,
) -> None:
    """What the dashboard and /readyz say of a database: nothing there, behind this
    version, fine — and fine too when a newer Jobdesk migrated it (a rolling deploy
    keeps the older processes serving)."""

    def problem() -> str | None:
        with empty_engine.connect() as conn:
            return schema_problem(conn)

    assert problem() == NO_SCHEMA == "The database has no Jobdesk schema: run `jobdesk migrate`"
    upgrade(empty_engine, "jobdesk_0001")
    assert problem() == (
        f"The database's Jobdesk schema is at jobdesk_0001, behind this Jobdesk's "
        f"{head_revision()}: run `jobdesk migrate`"
    )
    upgrade(empty_engine)
    assert problem() is None
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobdesk_alembic_version SET version_num = 'jobdesk_0099'"))
    assert problem() is None


def test_jobdesk_tables_without_history_are_named_not_half_migrated(
    empty_engine: sa.Engine,
) -> None:
    with empty_engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE jobdesk_jobs (id INTEGER PRIMARY KEY)"))
    with pytest.raises(MigrationError, match=r"has Jobdesk tables \(jobdesk_jobs\) but no"):
        upgrade(empty_engine)
    assert set(sa.inspect(empty_engine).get_table_names()) == {"jobdesk_jobs"}


def _literals(sql: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", sql))


@pytest.mark.slow
def test_check_constraints_match_the_models(empty_engine: sa.Engine) -> None:
    """Autogenerate compares no CHECK constraints: compare their names and the values
    they allow (the enums behind them) here."""
    upgrade(empty_engine)
    inspector = sa.inspect(empty_engine)
    for table in metadata.tables.values():
        declared = {
            str(c.name): _literals(str(c.sqltext))
            for c in table.constraints
            if isinstance(c, sa.CheckConstraint)
        }
        found = {
            str(c["name"]): _literals(c["sqltext"])
            for c in inspector.get_check_constraints(table.name)
        }
        assert found == declared, table.name
