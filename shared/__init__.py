"""Jobdesk's domain: the schema, the job lifecycle and every query, shared by the worker
and the dashboard. Apps need only `enqueue` / `enqueue_many`."""

from shared.errors import PermanentError, RetryAfter, ValidationError
from shared.queue import NewJob, enqueue, enqueue_many

__all__ = [
    "NewJob",
    "PermanentError",
    "RetryAfter",
    "ValidationError",
    "enqueue",
    "enqueue_many",
]
