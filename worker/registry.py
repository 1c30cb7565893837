"""Job types a worker can run: the `@job` decorator and the registry behind it.

Job types are stable strings (`crm.sync`), never import paths, so code can move without
breaking queued jobs. Registering a type also declares its enqueue-time defaults
(queue, priority, max_attempts, timeout) in `jobdesk.shared.core.job_types`, so an app that imports
its job module enqueues into the right queue.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobdesk.shared.core import validation
from jobdesk.shared.core.job_types import (
    TypeDefaults,
    defaults_for,
    register_defaults,
)
from jobdesk.shared.core.payload_checks import Check, register_payload_check
from jobdesk.shared.core.retry import Backoff, ExponentialBackoff, RetryPolicy
from jobdesk.shared.settings import Rate, SettingsError
from jobdesk.worker.schedules import ScheduleSpec

if TYPE_CHECKING:
    from jobdesk.worker.context import JobContext

Handler = Callable[[dict[str, Any], "JobContext"], Any]

#: Hard cutoff when a type declares no timeout.
DEFAULT_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class RateLimit:
    """At most `rate` jobs per `per_seconds`, shared by every worker, under `key`."""

    key: str
    rate: float
    per_seconds: float = 1.0
    burst: float | None = None

    @classmethod
    def parse(cls, key: str, spec: str) -> RateLimit:
        """`"10/s"`, `"600/m"`, `"5/1.5s"` → RateLimit."""
        try:
            return cls.of(key, Rate.parse(spec))
        except SettingsError as exc:
            raise ValueError(f"rate limit {exc}") from None

    @classmethod
    def of(cls, key: str, rate: Rate) -> RateLimit:
        return cls(key, rate.count, rate.per_seconds)


@dataclass(frozen=True)
class JobType:
    """A registered handler and its execution rules."""

    name: str
    handler: Handler
    queue: str
    priority: int
    max_attempts: int
    timeout_seconds: float
    retry: RetryPolicy
    rate_limit: RateLimit | None = None
    #: `async def` handler: the worker runs it on its event loop (`worker.async_pool`).
    is_async: bool = False
    #: At most this many jobs of one `concurrency_key` run at once (None: no limit).
    concurrency: int | None = None


def handler_kind(name: str, fn: object) -> bool:
    """True for a coroutine handler (`async def`, also behind `functools.partial` or as
    an object's `async def __call__`), False for a plain function; anything the worker
    cannot run is refused here, at import, with the reason."""
    if not callable(fn):
        raise TypeError(f"job type {name!r}: the handler must be callable, got {type(fn).__name__}")
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    call = target if inspect.isroutine(target) or inspect.isclass(target) else target.__call__
    if inspect.isasyncgenfunction(call) or inspect.isgeneratorfunction(call):
        kind = "an async generator" if inspect.isasyncgenfunction(call) else "a generator"
        raise TypeError(
            f"job type {name!r}: the handler is {kind} function (it yields); a handler "
            "returns its result — `def` for blocking code, `async def` for asyncio code"
        )
    if inspect.isclass(target):
        raise TypeError(
            f"job type {name!r}: the handler is the class {target.__name__}; register a "
            "function (or an instance with __call__)"
        )
    return inspect.iscoroutinefunction(call)


class Registry:
    """Name → JobType, plus the schedules declared beside them. One process-wide instance
    (`registry`) serves `@job` and `jobdesk.schedule`."""

    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}
        self._schedules: dict[str, ScheduleSpec] = {}

    def add_schedule(self, spec: ScheduleSpec) -> None:
        existing = self._schedules.get(spec.name)
        if existing is not None and existing != spec:
            raise ValueError(f"schedule {spec.name!r} is already declared differently")
        self._schedules[spec.name] = spec

    def schedules(self) -> list[ScheduleSpec]:
        return [self._schedules[name] for name in sorted(self._schedules)]

    def add(self, job_type: JobType) -> None:
        existing = self._types.get(job_type.name)
        if existing is not None and existing.handler is not job_type.handler:
            raise ValueError(f"job type {job_type.name!r} is already registered")
        self._types[job_type.name] = job_type

    def get(self, name: str) -> JobType | None:
        return self._types.get(name)

    def names(self) -> list[str]:
        return sorted(self._types)

    def names_by_kind(self) -> tuple[list[str], list[str]]:
        """(plain handlers' type names, `async def` handlers' type names)."""
        plain = [n for n in self.names() if not self._types[n].is_async]
        coroutines = [n for n in self.names() if self._types[n].is_async]
        return plain, coroutines

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._types.values()})

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __len__(self) -> int:
        return len(self._types)

    def policy_for(self, name: str) -> RetryPolicy:
        job_type = self._types.get(name)
        return job_type.retry if job_type else RetryPolicy()


registry = Registry()


def job(
    name: str,
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff: Backoff | None = None,
    priority: int | None = None,
    rate_limit: str | RateLimit | None = None,
    cron: str | None = None,
    every: float | None = None,
    tz: str = "UTC",
    catch_up: bool = False,
    validate: Check | None = None,
    concurrency: int | None = None,
    target: Registry | None = None,
) -> Callable[[Handler], Handler]:
    """Register `fn(payload, ctx)` as the handler of job type `name`.

    `fn` is a plain function (run on a slot thread, `--concurrency` at once) or an
    `async def` (run on the worker's event loop, `JOBDESK_ASYNC_CONCURRENCY` at once);
    generators and anything else the worker cannot run are refused here.

    Any exception retries with backoff; `PermanentError` sends the job to `dead` at once;
    `RetryAfter(seconds)` retries at that time. The return value (JSON-able) is stored as
    the job's result.

    `cron="0 2 * * *"` (5 fields, in `tz`, default UTC) or `every=30` (seconds) also
    declares a schedule of the same name with an empty payload: the maintenance leader
    enqueues one job per slot; after downtime only the latest missed slot runs unless
    `catch_up=True`.

    `concurrency=N`: at most N jobs of this type that share a `concurrency_key` (given at
    enqueue) are queued, running or retrying at once, across every worker; the others
    wait for a slot (`jobdesk.shared.flow.concurrency`).

    `validate=fn` checks a payload before it is enqueued or saved from the dashboard's
    fix form: `fn(payload)` returns a list of `ValidationError(field, message)` (field
    `payload.<key>`) or raises one (a plain ValueError names `payload`); the caller gets
    the problems instead of a job that would fail at once. It runs in every process that
    imported the module declaring it (the dashboard imports `JOBDESK_JOB_MODULES`).
    """
    validation.check_name("job_type", name)
    base = defaults_for(name)
    resolved_queue = validation.check_name("queue", queue or base.queue)
    resolved_priority = validation.check_priority(base.priority if priority is None else priority)
    resolved_attempts = validation.check_max_attempts(
        base.max_attempts if max_attempts is None else max_attempts
    )
    resolved_timeout = validation.check_timeout(
        timeout or base.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    )
    resolved_concurrency = validation.check_concurrency(concurrency)
    limit = RateLimit.parse(name, rate_limit) if isinstance(rate_limit, str) else rate_limit
    spec = None
    if cron is not None or every is not None:
        spec = ScheduleSpec(name, name, {}, cron=cron, every=every, tz=tz, catch_up=catch_up)

    def register(fn: Handler) -> Handler:
        is_async = handler_kind(name, fn)
        # `target or registry` would pick the global one for an empty (falsy) Registry.
        (registry if target is None else target).add(
            JobType(
                name=name,
                handler=fn,
                queue=resolved_queue,
                priority=resolved_priority,
                max_attempts=resolved_attempts,
                timeout_seconds=resolved_timeout,
                retry=RetryPolicy(backoff or ExponentialBackoff()),
                rate_limit=limit,
                is_async=is_async,
                concurrency=resolved_concurrency,
            )
        )
        register_defaults(
            name,
            TypeDefaults(
                resolved_queue,
                resolved_priority,
                resolved_attempts,
                resolved_timeout,
                resolved_concurrency,
            ),
        )
        if spec is not None:
            (registry if target is None else target).add_schedule(spec)
        if validate is not None:
            register_payload_check(name, validate)
        return fn

    return register


def schedule(
    name: str,
    job_type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    cron: str | None = None,
    every: float | None = None,
    tz: str = "UTC",
    catch_up: bool = False,
    target: Registry | None = None,
) -> ScheduleSpec:
    """Declare a recurring job: `schedule("report.nightly.eu", "report.generate",
    {"report": "nightly_activity"}, cron="0 2 * * *", tz="Europe/Berlin")`. Several
    schedules may share one job type; each enqueues exactly one job per slot."""
    spec = ScheduleSpec(
        name, job_type, dict(payload or {}), cron=cron, every=every, tz=tz, catch_up=catch_up
    )
    (registry if target is None else target).add_schedule(spec)
    return spec
