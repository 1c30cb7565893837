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

from jobdesk.shared.core.enqueue import NewJob, enqueue, enqueue_many  # noqa: E402
from jobdesk.shared.core.errors import (  # noqa: E402
    DatabaseUnavailable,
    PermanentError,
    RetryAfter,
    SchemaMissingError,
    Snooze,
    ValidationError,
)
from jobdesk.shared.core.results import JobResult, job_result, wait  # noqa: E402
from jobdesk.shared.workflows.batches import Batch, enqueue_batch  # noqa: E402

if TYPE_CHECKING:
    from jobdesk.shared.core.enqueue_async import enqueue_async, enqueue_many_async
    from jobdesk.shared.core.results_async import wait_async
    from jobdesk.worker.registry import RateLimit, job, schedule

# The job authors' API comes from the worker package, loaded on first use: a web process
# that only enqueues (or serves the dashboard) never imports the worker runtime.
_WORKER_API = {"RateLimit", "job", "schedule"}
# The asyncio API loads SQLAlchemy's asyncio extension: only for apps that use it.
_ASYNC_API = {
    "enqueue_async": "enqueue_async",
    "enqueue_many_async": "enqueue_async",
    "wait_async": "results_async",
}


def __getattr__(name: str) -> Any:
    if name in _WORKER_API:
        from jobdesk.worker import registry

        return getattr(registry, name)
    if name in _ASYNC_API:
        module = importlib.import_module(f"jobdesk.shared.core.{_ASYNC_API[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'jobdesk' has no attribute {name!r}")


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
