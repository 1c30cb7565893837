"""Per-type defaults (queue, priority, max_attempts, timeout) known at enqueue time.

An app that enqueues `email.send` without naming a queue must land in the queue the
email workers listen on, even if the app never imports the worker code. The built-in
types are declared here; `@job` in the worker registers user types the same way. Types
this process has not registered are looked up in what workers published
(`jobdesk.shared.core.published_types`); `FALLBACK_DEFAULTS` is what a type nobody
declared gets, the same as the `jobdesk_jobs` column defaults of a plain-SQL insert.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

from jobdesk.shared.core.models import DEFAULT_QUEUE, MAX_ATTEMPTS_DEFAULT, PRIORITY_DEFAULT


@dataclass(frozen=True, slots=True)
class TypeDefaults:
    queue: str = DEFAULT_QUEUE
    priority: int = PRIORITY_DEFAULT
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    timeout_seconds: float | None = None
    #: `@job(concurrency=N)`: at most N jobs of one `concurrency_key` run at once.
    concurrency: int | None = None


BUILTIN_DEFAULTS: dict[str, TypeDefaults] = {
    "email.send": TypeDefaults(queue="email", priority=3, max_attempts=6, timeout_seconds=20),
    "webhook.deliver": TypeDefaults(queue="webhooks", max_attempts=8, timeout_seconds=10),
    "report.generate": TypeDefaults(
        queue="reports", priority=7, max_attempts=3, timeout_seconds=60
    ),
    "report.chunk": TypeDefaults(queue="reports", priority=7, max_attempts=5, timeout_seconds=300),
    "report.assemble": TypeDefaults(
        queue="reports", priority=7, max_attempts=5, timeout_seconds=300
    ),
}

_registered: dict[str, TypeDefaults] = dict(BUILTIN_DEFAULTS)
#: Queue `default`, priority 5, 5 attempts, no timeout (the worker then applies the
#: type's own timeout when it runs the job).
FALLBACK_DEFAULTS = TypeDefaults()


def register_defaults(job_type: str, defaults: TypeDefaults) -> None:
    """Declare the defaults for `job_type` (called by `@job`)."""
    _registered[job_type] = defaults


def defaults_for(job_type: str) -> TypeDefaults:
    return _registered.get(job_type, FALLBACK_DEFAULTS)


def local_defaults(job_type: str) -> TypeDefaults | None:
    """The defaults registered in this process (built in or `@job`), or None."""
    return _registered.get(job_type)


def known_types() -> frozenset[str]:
    return frozenset(_registered)


class JobModuleError(RuntimeError):
    """A module named in JOBDESK_JOB_MODULES / --jobs could not be imported."""


def load_modules(names: Iterable[str]) -> None:
    """Import the app's job modules so their `@job` declarations (defaults, payload
    checks, schedules, handlers) are registered in this process."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise JobModuleError(
                f"cannot import job module {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
