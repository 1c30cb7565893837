"""Alembic environment: Jobdesk's own tables and history only.

Targets `jobdesk.shared.schema.metadata`; batch mode on SQLite. The version table is
`jobdesk_alembic_version`, so an app's own Alembic history in the same database (in
`alembic_version`) is neither read nor written.
"""

from __future__ import annotations

from alembic import context

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import CONTEXT_OPTIONS
from jobdesk.shared.schema import metadata

config = context.config


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or None)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        **CONTEXT_OPTIONS,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `jobdesk migrate`")
run_migrations()
