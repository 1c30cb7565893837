"""Migrations produce exactly the declared schema on both databases (no drift)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import current_revision, head_revision, is_up_to_date, upgrade
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings
from tests.conftest import PG_ADMIN_URL

#: Declared with `ddl_if(dialect="postgresql")`: trigram indexes exist only there.
POSTGRESQL_ONLY_INDEXES = {"ix_jobs_last_error_trgm", "ix_job_attempts_error_trgm"}


@pytest.fixture
def empty_engine(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[sa.Engine]:
    """An engine on a brand-new, empty database of the current backend."""
    if backend == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}", settings=Settings())
        yield engine
        engine.dispose()
        return
    request.getfixturevalue("pg_url")  # skips (or fails in CI) without PostgreSQL
    name = f"jobdesk_migrate_{os.getpid()}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url, settings=Settings())
    yield engine
    engine.dispose()
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def drift(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = compare_metadata(context, metadata)
    if engine.dialect.name == "sqlite":
        diffs = [d for d in diffs if not is_postgresql_only_index(d)]
    return diffs


def is_postgresql_only_index(diff: Any) -> bool:
    return (
        isinstance(diff, tuple)
        and diff[0] == "add_index"
        and diff[1].name in POSTGRESQL_ONLY_INDEXES
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
    indexes = {ix["name"]: ix for ix in sa.inspect(empty_engine).get_indexes("jobs")}
    assert {"ix_jobs_claimable", "uq_jobs_running_group_key", "uq_jobs_idempotency_key"} <= set(
        indexes
    )
    assert indexes["uq_jobs_running_group_key"]["unique"]
    assert indexes["uq_jobs_idempotency_key"]["unique"]
    names = set(indexes)
    if empty_engine.dialect.name == "postgresql":
        assert "ix_jobs_last_error_trgm" in names
        attempt_indexes = {
            ix["name"] for ix in sa.inspect(empty_engine).get_indexes("job_attempts")
        }
        assert "ix_job_attempts_error_trgm" in attempt_indexes
    else:
        assert not names & POSTGRESQL_ONLY_INDEXES
