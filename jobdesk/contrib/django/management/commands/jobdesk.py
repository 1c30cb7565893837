"""`manage.py jobdesk …`: Jobdesk's command line on the database of Django's settings.

    python manage.py jobdesk migrate
    python manage.py jobdesk worker --jobs myapp.jobs
    python manage.py jobdesk --database reports dashboard

Everything after `jobdesk` (but `--database ALIAS`, default `"default"`) goes to the
`jobdesk` command unchanged; `JOBDESK_DATABASE_URL` is set from Django's `DATABASES`
unless it is set already.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS


class Command(BaseCommand):
    help = "Run Jobdesk's command line (worker, migrate, dashboard, …) on Django's database."

    def run_from_argv(self, argv: list[str]) -> None:
        args = list(argv[2:])
        alias = DEFAULT_DB_ALIAS
        for index, arg in enumerate(args):
            if arg == "--database" and index + 1 < len(args):
                alias = args[index + 1]
                del args[index : index + 2]
                break
            if arg.startswith("--database="):
                alias = arg.split("=", 1)[1]
                del args[index]
                break
        # Not `execute`: Django's own options (--settings, --verbosity, …) are the
        # jobdesk command's to refuse or take, and it parses them itself.
        try:
            self.handle(*args, database=alias)
        finally:
            from django.db import connections

            connections.close_all()

    def handle(self, *args: Any, **options: Any) -> None:
        from jobdesk.cli import cli
        from jobdesk.contrib.django.connection import sqlalchemy_url

        alias = options.get("database") or DEFAULT_DB_ALIAS
        if "JOBDESK_DATABASE_URL" not in os.environ:
            url = sqlalchemy_url(alias, driver="psycopg")
            os.environ["JOBDESK_DATABASE_URL"] = url.render_as_string(hide_password=False)
        cli.main(args=list(args), prog_name="manage.py jobdesk")
