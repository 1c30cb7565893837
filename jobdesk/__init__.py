"""Jobdesk: a background job queue that lives in your database, with an operator dashboard.

Enqueue from your app, in your own transaction (asyncio apps: `await enqueue_async(session, …)`)::

    from jobdesk import enqueue

    with engine.begin() as conn:
        conn.execute(users.insert().values(id=42, email="ana@example.com"))
        enqueue(conn, "email.send", {"to": "ana@example.com", "template": "welcome"},
                idempotency_key="welcome_email:user:42")

Write job types for the worker (`jobdesk worker --jobs yourapp.jobs`)::

    from jobdesk import job, PermanentError, RetryAfter

    @job("crm.sync", queue="webhooks", max_attempts=8, timeout=10)
    def crm_sync(payload: dict, ctx) -> dict | None: ...

Recurring jobs: `@job("report.nightly", cron="0 2 * * *", tz="Europe/Berlin")`,
`@job("cache.warm", every=30)`, or `schedule(name, job_type, payload, cron=…)`.

The dashboard is `jobdesk.dashboard.create_app()` (or `init_dashboard(app)` to mount it
in your Flask app). Everything Jobdesk stores is in `jobdesk_*` tables.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobdesk import _layout

_layout.install()  # a checkout: the root folders are jobdesk.shared, .worker, .dashboard

if TYPE_CHECKING:
    from jobdesk.shared.core.enqueue import NewJob, enqueue, enqueue_many
    from jobdesk.shared.core.enqueue_async import enqueue_async, enqueue_many_async
    from jobdesk.shared.core.errors import (
        DatabaseUnavailable,
        PermanentError,
        RetryAfter,
        SchemaMissingError,
        Snooze,
        ValidationError,
    )
    from jobdesk.shared.core.results import JobResult, job_result, wait
    from jobdesk.shared.core.results_async import wait_async
    from jobdesk.shared.workflows.batches import Batch, enqueue_batch
    from jobdesk.worker.registry import RateLimit, job, schedule

# Every name is loaded on first use, from the module that owns it: `import jobdesk` (and
# so every `jobdesk.…` import, the `jobdesk` command's included) costs nothing until the
# app enqueues; a web process that only enqueues never imports the worker runtime, and
# the asyncio API (SQLAlchemy's asyncio extension) loads only for apps that use it.
_OWNERS = {
    "NewJob": "jobdesk.shared.core.enqueue",
    "enqueue": "jobdesk.shared.core.enqueue",
    "enqueue_many": "jobdesk.shared.core.enqueue",
    "enqueue_async": "jobdesk.shared.core.enqueue_async",
    "enqueue_many_async": "jobdesk.shared.core.enqueue_async",
    "DatabaseUnavailable": "jobdesk.shared.core.errors",
    "PermanentError": "jobdesk.shared.core.errors",
    "RetryAfter": "jobdesk.shared.core.errors",
    "SchemaMissingError": "jobdesk.shared.core.errors",
    "Snooze": "jobdesk.shared.core.errors",
    "ValidationError": "jobdesk.shared.core.errors",
    "JobResult": "jobdesk.shared.core.results",
    "job_result": "jobdesk.shared.core.results",
    "wait": "jobdesk.shared.core.results",
    "wait_async": "jobdesk.shared.core.results_async",
    "Batch": "jobdesk.shared.workflows.batches",
    "enqueue_batch": "jobdesk.shared.workflows.batches",
    "RateLimit": "jobdesk.worker.registry",
    "job": "jobdesk.worker.registry",
    "schedule": "jobdesk.worker.registry",
}


def __getattr__(name: str) -> Any:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'jobdesk' has no attribute {name!r}")
    value = getattr(importlib.import_module(owner), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNERS))


__all__ = [
    "Batch",
    "DatabaseUnavailable",
    "JobResult",
    "NewJob",
    "PermanentError",
    "RateLimit",
    "RetryAfter",
    "SchemaMissingError",
    "Snooze",
    "ValidationError",
    "enqueue",
    "enqueue_async",
    "enqueue_batch",
    "enqueue_many",
    "enqueue_many_async",
    "job",
    "job_result",
    "schedule",
    "wait",
    "wait_async",
]
