"""Guide: Django enqueues with the documented SQL insert on its own connection, inside
`transaction.atomic()` — so the job commits or rolls back with the app's write::

    from django.db import connection, transaction

    with transaction.atomic():
        user = User.objects.create(email=email)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key) "
                "VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (idempotency_key)"
                " WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL"
                " DO NOTHING",
                ["email.send", "email",
                 json.dumps({"to_user_id": user.id, "template": "welcome"}),
                 f"welcome_email:user:{user.id}"],
            )
            # PostgreSQL only: wake idle workers now (they poll otherwise).
            cursor.execute("SELECT pg_notify('jobdesk_jobs', 'email')")

Tested here with Django's real database backends (sqlite3 and postgresql on psycopg 3),
the app's table written with a raw cursor too so no Django models are needed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.integration.appdb import app_tables, claim_all, jobs_with_key, signup_count

django = pytest.importorskip("django")

from django.conf import settings as django_settings  # noqa: E402
from django.db import connections, transaction  # noqa: E402

ENQUEUE_SQL = (
    "INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key) "
    "VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (idempotency_key)"
    " WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL DO NOTHING"
)


class Boom(Exception):
    pass


def _django_database(url: sa.URL) -> dict[str, object]:
    if url.get_backend_name() == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.database}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.database,
        "USER": url.username or "",
        "PASSWORD": url.password or "",
        "HOST": url.host or "",
        "PORT": str(url.port or ""),
    }


@pytest.fixture
def alias(db_url: str, engine: sa.Engine) -> Iterator[str]:
    """A Django database alias pointing at this test's database."""
    if not django_settings.configured:
        django_settings.configure(DATABASES={}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
    name = f"jobdesk_{uuid.uuid4().hex[:8]}"
    database = _django_database(sa.make_url(db_url))
    configured = connections.configure_settings({"default": database, name: database})
    connections.settings[name] = configured[name]
    with app_tables(engine):
        try:
            yield name
        finally:
            connections[name].close()
            del connections.settings[name]


def _sign_up(alias: str, email: str) -> int:
    """The app's view body: user row + job row, one transaction."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO it_signups (email) VALUES (%s)", [email])
        cursor.execute("SELECT id FROM it_signups WHERE email = %s", [email])
        user_id = int(cursor.fetchone()[0])
        payload = json.dumps({"to_user_id": user_id, "template": "welcome"})
        key = f"welcome_email:user:{user_id}"
        cursor.execute(ENQUEUE_SQL, ["email.send", "email", payload, key])
        cursor.execute(ENQUEUE_SQL, ["email.send", "email", payload, key])  # a retry: no-op
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_notify('jobdesk_jobs', 'email')")
    return user_id


def test_atomic_block_commits_user_and_job(alias: str, engine: sa.Engine) -> None:
    with transaction.atomic(using=alias):
        user_id = _sign_up(alias, "ana@example.com")
    assert signup_count(engine) == 1
    found = jobs_with_key(engine, f"welcome_email:user:{user_id}")
    assert len(found) == 1
    assert claim_all(engine) == found


def test_atomic_block_rolled_back_leaves_neither(alias: str, engine: sa.Engine) -> None:
    created: list[int] = []

    def view() -> None:
        with transaction.atomic(using=alias):
            created.append(_sign_up(alias, "ben@example.com"))
            raise Boom  # anything failing after the enqueue

    with pytest.raises(Boom):
        view()
    assert signup_count(engine) == 0
    assert jobs_with_key(engine, f"welcome_email:user:{created[0]}") == []
    assert claim_all(engine) == []
