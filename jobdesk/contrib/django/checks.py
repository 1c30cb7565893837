"""`manage.py check`: Jobdesk's tables are missing or behind in Django's database.

Checks the database named by the `JOBDESK_DJANGO_DATABASE` setting (default
`"default"`). A database that cannot be reached is a warning, not an error: the check
must not stop `runserver` or a deploy step that runs before the database is up.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS

from jobdesk.contrib.django.connection import sqlalchemy_url
from jobdesk.shared.migrate import current_revision, head_revision


@checks.register(checks.Tags.database, "jobdesk")
def jobdesk_migrations(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    alias = getattr(settings, "JOBDESK_DJANGO_DATABASE", DEFAULT_DB_ALIAS)
    # Jobdesk's own driver: the check reads, whatever DBAPI Django's backend uses.
    engine = sa.create_engine(sqlalchemy_url(alias, driver="psycopg"), poolclass=sa.pool.NullPool)
    try:
        current = current_revision(engine)
    except sa.exc.SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return [
            checks.Warning(
                f"could not read Jobdesk's migration state of database {alias!r}: "
                f"{first[0] if first else type(exc).__name__}",
                id="jobdesk.W001",
            )
        ]
    finally:
        engine.dispose()
    head = head_revision()
    if current == head:
        return []
    state = "are not in" if current is None else f"are at {current}, behind {head} in"
    return [
        checks.Error(
            f"Jobdesk's tables {state} database {alias!r}",
            hint="run `python manage.py jobdesk migrate`",
            id="jobdesk.E001",
        )
    ]
