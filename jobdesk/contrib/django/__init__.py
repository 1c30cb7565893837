"""Jobdesk in a Django project: enqueue in Django's own transaction.

Add `"jobdesk.contrib.django"` to `INSTALLED_APPS`, then::

    from django.db import transaction
    from jobdesk.contrib.django import enqueue

    with transaction.atomic():
        user = User.objects.create(email=email)
        enqueue("email.send", {"to": email, "template": "welcome"},
                idempotency_key=f"welcome_email:user:{user.pk}")

The job is written on Django's connection for the database (`using=`, default
`"default"`), inside the current `transaction.atomic()` block: it commits or rolls back
with the user. Outside an atomic block it commits at once, like Django's own writes.
PostgreSQL (psycopg 3 or psycopg2) and SQLite.

`manage.py jobdesk worker|migrate|…` runs Jobdesk's command line on the database of
Django's settings (`--database ALIAS`), and `manage.py check` reports Jobdesk's
migrations when they are missing or behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from jobdesk.contrib.django.connection import lent_connection
from jobdesk.shared.core.enqueue import EnqueueOptions, NewJob
from jobdesk.shared.core.enqueue import enqueue as enqueue_on
from jobdesk.shared.core.enqueue import enqueue_many as enqueue_many_on

__all__ = ["NewJob", "enqueue", "enqueue_many"]


def enqueue(
    job_type: str,
    payload: Mapping[str, Any],
    *,
    using: str | None = None,
    **options: Unpack[EnqueueOptions],
) -> int:
    """`jobdesk.enqueue` on Django's connection `using` (default `"default"`), in its
    current transaction; the same options and errors. The job's id."""
    with lent_connection(using) as conn:
        return enqueue_on(conn, job_type, payload, **options)


def enqueue_many(
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    using: str | None = None,
    max_payload_bytes: int | None = None,
) -> list[int]:
    """`jobdesk.enqueue_many` on Django's connection `using`; ids in input order."""
    with lent_connection(using) as conn:
        return enqueue_many_on(conn, new_jobs, max_payload_bytes=max_payload_bytes)
