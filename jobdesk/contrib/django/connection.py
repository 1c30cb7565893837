"""Django's database connection, lent to Jobdesk's SQLAlchemy code.

Jobdesk writes through a SQLAlchemy `Connection`; a Django project writes through
Django's connection of each database alias (one per thread). To put a job in Django's
transaction, each alias gets a SQLAlchemy engine whose "connection" is `_Lent`: a view of
the calling thread's Django connection that forwards everything to it except commit,
rollback and close — those stay Django's (`transaction.atomic()`, Django's connection
management). SQLAlchemy's one-connection-per-thread pool keeps one such view per thread,
so its per-connection set-up runs once per thread, and each use reaches whatever
connection Django holds at that moment (Django may have reconnected in between).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

_engines: dict[str, sa.Engine] = {}
_lock = threading.Lock()


class _Lent:
    """Django's DBAPI connection for `alias` in the calling thread, minus what Django
    owns: Jobdesk never commits, rolls back or closes it."""

    __slots__ = ("_alias",)

    def __init__(self, alias: str) -> None:
        object.__setattr__(self, "_alias", alias)

    def _django(self) -> Any:
        wrapper = connections[self._alias]
        wrapper.ensure_connection()
        return wrapper.connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._django(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._django(), name, value)

    def commit(self) -> None:
        """Django's to do (`transaction.atomic()`, or autocommit outside one)."""

    def rollback(self) -> None:
        """Django's to do: an error in the enqueue propagates and Django rolls back."""

    def close(self) -> None:
        """Django's to do."""


def sqlalchemy_url(alias: str | None = None, *, driver: str | None = None) -> sa.URL:
    """The SQLAlchemy URL of Django's database `alias`. `driver` picks the PostgreSQL
    DBAPI (default: the one Django's backend uses); Jobdesk's own command line uses
    psycopg 3."""
    alias = alias or DEFAULT_DB_ALIAS
    wrapper = connections[alias]
    settings = wrapper.settings_dict
    if wrapper.vendor == "sqlite":
        return sa.URL.create("sqlite", database=str(settings["NAME"]))
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"jobdesk.contrib.django: database {alias!r} is {wrapper.vendor}; Jobdesk "
            "supports PostgreSQL and SQLite"
        )
    if driver is None:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3  # PostgreSQL only

        driver = "psycopg" if is_psycopg3 else "psycopg2"
    options = settings.get("OPTIONS") or {}
    query = {k: str(v) for k, v in options.items() if k in _LIBPQ_OPTIONS}
    return sa.URL.create(
        f"postgresql+{driver}",
        username=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None,
        port=int(settings["PORT"]) if settings.get("PORT") else None,
        database=settings.get("NAME") or None,
        query=query,
    )


#: Connection options of Django's `OPTIONS` that are libpq parameters (kept in the URL).
_LIBPQ_OPTIONS = frozenset(
    {"sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name"}
)


def lent_engine(alias: str | None = None) -> sa.Engine:
    """The engine whose connections are Django's own for `alias` (one per alias)."""
    alias = alias or DEFAULT_DB_ALIAS
    engine = _engines.get(alias)
    if engine is None:
        with _lock:
            engine = _engines.get(alias)
            if engine is None:
                # No hstore set-up on PostgreSQL: it would register adapters on
                # Django's connection.
                postgresql = connections[alias].vendor == "postgresql"
                options = {"use_native_hstore": False} if postgresql else {}
                engine = sa.create_engine(
                    sqlalchemy_url(alias),
                    creator=lambda: _Lent(alias),
                    poolclass=sa.pool.SingletonThreadPool,
                    pool_reset_on_return=None,
                    **options,
                )
                _engines[alias] = engine
    return engine


@contextmanager
def lent_connection(alias: str | None = None) -> Iterator[sa.Connection]:
    """A SQLAlchemy connection on Django's connection for `alias`, in Django's current
    transaction; leaving it commits nothing and closes nothing."""
    with lent_engine(alias).connect() as conn:
        yield conn
