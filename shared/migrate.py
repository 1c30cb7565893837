"""Schema migrations: run Alembic to head against an engine.

The migration scripts live in the top-level `migrations/` folder of a checkout, or
inside the installed package (`shared/migrations`) when installed from a wheel.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

_HERE = Path(__file__).resolve().parent


def migrations_dir() -> Path:
    for candidate in (_HERE.parent / "migrations", _HERE / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("the Jobdesk migrations folder is missing from this installation")


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
