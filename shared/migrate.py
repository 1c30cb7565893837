"""Schema migrations: run Jobdesk's own Alembic history to head against an engine.

Jobdesk shares the app's database, so it keeps to itself: its migration scripts ship
inside the package (`jobdesk/migrations`) and are the only ones ever run, its tables
are all `jobdesk_*`, and its history lives in `jobdesk_alembic_version` — an app's own
`alembic_version` (and its `jobs`, `users`, … tables) are never read or written.

Failures a person can fix come out as one `MigrationError` line naming the problem.
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from jobdesk.shared.assets import asset_path
from jobdesk.shared.core.errors import NO_SCHEMA, JobdeskError

__all__ = [
    "CONTEXT_OPTIONS",
    "NO_SCHEMA",
    "VERSION_TABLE",
    "MigrationError",
    "current_revision",
    "head_revision",
    "is_up_to_date",
    "schema_problem",
    "upgrade",
]

#: Jobdesk's Alembic history, apart from the app's `alembic_version`.
VERSION_TABLE = "jobdesk_alembic_version"


def owns(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic's `include_name`: autogenerate compares Jobdesk's tables only, never the
    app's tables that share the database."""
    return type_ != "table" or (name or "").startswith("jobdesk_")


#: Everything a MigrationContext needs to see Jobdesk's schema and nothing else.
CONTEXT_OPTIONS = {"version_table": VERSION_TABLE, "include_name": owns}


class MigrationError(JobdeskError):
    """The schema cannot be brought to head; the message says why in one line."""


def migrations_dir() -> Path:
    return asset_path("migrations")


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring Jobdesk's tables at `engine` up to `revision` (idempotent, one transaction)."""
    config = alembic_config()
    known = _known_revisions()
    try:
        with engine.begin() as conn:
            stored = _stored_revision(conn)
            if stored is not None and stored not in known:
                raise MigrationError(
                    f"{VERSION_TABLE} says this database is at revision {stored!r}, which this "
                    f"Jobdesk does not know (its head is {head_revision()!r}): it was migrated "
                    "by a newer Jobdesk — install that version or newer"
                )
            if stored is None:
                _refuse_orphan_tables(conn)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except CommandError as exc:
        raise MigrationError(f"migration failed: {_first_line(exc)}") from None
    except sa.exc.DBAPIError as exc:
        raise MigrationError(_database_failure(exc)) from None


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return _stored_revision(conn)


def head_revision() -> str | None:
    return _scripts().get_current_head()


def is_up_to_date(engine: sa.Engine) -> bool:
    return current_revision(engine) == head_revision()


def schema_problem(conn: sa.Connection) -> str | None:
    """Why Jobdesk cannot work on this database yet, as one sentence naming the command
    that fixes it — no Jobdesk schema at all (`NO_SCHEMA`), or one behind this
    Jobdesk's migrations — or None. A schema *ahead* of this Jobdesk (a newer one
    migrated it, as in a rolling deploy) is no problem here: the older code keeps
    working on it, and `upgrade` is what refuses to touch it."""
    stored = _stored_revision(conn)
    if stored is None:
        return NO_SCHEMA
    head = head_revision()
    if stored == head or stored not in _known_revisions():
        return None
    return (
        f"The database's Jobdesk schema is at {stored}, behind this Jobdesk's {head}: "
        "run `jobdesk migrate`"
    )


def _stored_revision(conn: sa.Connection) -> str | None:
    context = MigrationContext.configure(conn, opts=CONTEXT_OPTIONS)
    return context.get_current_revision()


def _known_revisions() -> set[str]:
    return {rev.revision for rev in _scripts().walk_revisions()}


@functools.cache
def _scripts() -> ScriptDirectory:
    """The shipped migration scripts, read once per process (`/readyz` asks often)."""
    return ScriptDirectory.from_config(alembic_config())


def _refuse_orphan_tables(conn: sa.Connection) -> None:
    """Jobdesk tables without Jobdesk history were made by hand or by a failed tool run:
    upgrading would fail on the first CREATE TABLE, so say what is there instead."""
    ours = sorted(
        name for name in sa.inspect(conn).get_table_names() if name.startswith("jobdesk_")
    )
    if ours:
        shown = ", ".join(ours[:3]) + (" …" if len(ours) > 3 else "")
        raise MigrationError(
            f"the database has Jobdesk tables ({shown}) but no {VERSION_TABLE}: they were not "
            "created by `jobdesk migrate`; drop them (or restore the version table) and "
            "migrate again"
        )


def _database_failure(exc: sa.exc.DBAPIError) -> str:
    detail = _first_line(exc.orig if exc.orig is not None else exc)
    if "pg_trgm" in str(exc.statement or "") or "pg_trgm" in detail:
        return (
            f"migration failed creating the pg_trgm extension ({detail}): ask a superuser to "
            "run `CREATE EXTENSION pg_trgm` in this database once, then migrate again"
        )
    if "permission denied" in detail:
        return f"migration failed: {detail} (the database user needs CREATE on its schema)"
    return f"migration failed: {detail}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
