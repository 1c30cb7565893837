"""Job-type defaults published by workers, and the per-process cache `enqueue` reads.

`@job("crm.sync", queue="slow", max_attempts=9, timeout=7)` declares its defaults only in
the processes that import the module. An app process that enqueues "crm.sync" without
importing it would otherwise put the job in queue `default` with 5 attempts, where the
workers serving `slow` never look. So every worker, at start, writes the defaults of
the types it registered to `jobdesk_job_types` (`publish_defaults`), and `enqueue` reads
them for types not registered locally (`PublishedDefaults.lookup`).

Two worker versions that declare a type differently: the row holds what the worker that
started last declared (`published_by`, `published_at` say which); the worker logs the
change when it overwrites a different declaration. Enqueueing processes see a change
within `PublishedDefaults.ttl_seconds` of it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import missing_schema
from jobdesk.shared.core.job_types import TypeDefaults
from jobdesk.shared.core.models import published_job_types

_t = published_job_types.c

#: How long an enqueueing process trusts what it read (a hit or "not published").
CACHE_TTL_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class PublishedType:
    """One row of `jobdesk_job_types`."""

    job_type: str
    defaults: TypeDefaults
    published_by: str
    published_at: datetime


@dataclass(frozen=True, slots=True)
class Republished:
    """A type whose published defaults a worker replaced with different ones."""

    job_type: str
    before: PublishedType
    after: TypeDefaults


def publish_defaults(
    conn: sa.Connection,
    defaults: Mapping[str, TypeDefaults],
    *,
    worker_id: str,
    now: datetime,
) -> list[Republished]:
    """Upsert the defaults of `defaults`' types as published by `worker_id` at `now`;
    returns the types whose previously published defaults differed."""
    if not defaults:
        return []
    previous = {row.job_type: row for row in list_published(conn, job_types=list(defaults))}
    changed = [
        Republished(name, previous[name], value)
        for name, value in sorted(defaults.items())
        if name in previous and previous[name].defaults != value
    ]
    insert = driver(conn).insert(published_job_types)
    rows = [
        {
            "job_type": name,
            "queue": value.queue,
            "priority": value.priority,
            "max_attempts": value.max_attempts,
            "timeout_seconds": value.timeout_seconds,
            "concurrency": value.concurrency,
            "published_by": worker_id,
            "published_at": now,
        }
        for name, value in sorted(defaults.items())  # one lock order for every worker
    ]
    statement = insert.values(rows).on_conflict_do_update(
        index_elements=[_t.job_type],
        set_={
            column: insert.excluded[column]
            for column in (
                "queue",
                "priority",
                "max_attempts",
                "timeout_seconds",
                "concurrency",
                "published_by",
                "published_at",
            )
        },
    )
    conn.execute(statement)
    return changed


def list_published(
    conn: sa.Connection, *, job_types: list[str] | None = None
) -> list[PublishedType]:
    """Published types by name (all of them, or only `job_types`)."""
    query = sa.select(published_job_types).order_by(_t.job_type)
    if job_types is not None:
        query = query.where(_t.job_type.in_(job_types))
    return [
        PublishedType(
            row.job_type,
            _defaults_of(row),
            row.published_by,
            row.published_at,
        )
        for row in conn.execute(query)
    ]


def published_defaults_of(conn: sa.Connection, job_type: str) -> TypeDefaults | None:
    """What the database holds for `job_type` now (one query), or None."""
    try:
        row = conn.execute(
            sa.select(
                _t.queue, _t.priority, _t.max_attempts, _t.timeout_seconds, _t.concurrency
            ).where(_t.job_type == job_type)
        ).first()
    except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
        missing = missing_schema(exc)
        if missing is not None:
            raise missing from exc
        raise
    if row is None:
        return None
    return _defaults_of(row)


def _defaults_of(row: Any) -> TypeDefaults:
    return TypeDefaults(
        row.queue, row.priority, row.max_attempts, row.timeout_seconds, row.concurrency
    )


class PublishedDefaults:
    """Per-process cache of `published_defaults_of`, per engine (each engine is one
    database) and type; an answer, "not published" included, is kept `ttl_seconds`."""

    def __init__(self, ttl_seconds: float = CACHE_TTL_SECONDS) -> None:
        self.ttl_seconds = ttl_seconds
        self._lock = threading.Lock()
        # Weak keys: an engine that is disposed and dropped takes its entries with it.
        self._by_engine: weakref.WeakKeyDictionary[
            sa.Engine, dict[str, tuple[float, TypeDefaults | None]]
        ] = weakref.WeakKeyDictionary()

    def lookup(self, conn: sa.Connection, job_type: str) -> TypeDefaults | None:
        """The published defaults of `job_type`, from the cache while it is fresh."""
        entries = self._by_engine.get(conn.engine)
        if entries is not None:
            entry = entries.get(job_type)
            if entry is not None and entry[0] > time.monotonic():
                return entry[1]
        return self.refresh(conn, job_type)

    def refresh(self, conn: sa.Connection, job_type: str) -> TypeDefaults | None:
        """Read `job_type` from the database now and cache the answer."""
        found = published_defaults_of(conn, job_type)
        expires = time.monotonic() + self.ttl_seconds
        with self._lock:
            entries = self._by_engine.setdefault(conn.engine, {})
            entries[job_type] = (expires, found)
        return found

    def clear(self) -> None:
        """Forget everything (the next enqueue of each type reads the table again)."""
        with self._lock:
            self._by_engine.clear()


#: The cache `enqueue` uses.
published_defaults = PublishedDefaults()
