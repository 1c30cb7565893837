"""Schema migrations: run Alembic to head against an engine.

The migration scripts ship inside the package (`jobdesk/migrations`) and are the only
ones ever run.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from jobdesk.shared.assets import asset_path


def migrations_dir() -> Path:
    return asset_path("migrations")


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the schema at `engine` up to `revision` (idempotent)."""
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def is_up_to_date(engine: sa.Engine) -> bool:
    return current_revision(engine) == head_revision()
