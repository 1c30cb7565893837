"""The Jobdesk worker: runs jobs registered with `@job` under leases, timeouts and retries.

Public API for job authors::

    from worker import job, PermanentError, RetryAfter

    @job("crm.sync", queue="webhooks", max_attempts=8, timeout=10)
    def crm_sync(payload: dict, ctx) -> dict | None: ...
"""

from shared.errors import PermanentError, RetryAfter, Snooze
from worker.registry import RateLimit, job, registry

__all__ = ["PermanentError", "RateLimit", "RetryAfter", "Snooze", "job", "registry"]
