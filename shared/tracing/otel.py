"""The one module that touches OpenTelemetry, and only once it is asked to: `api()` is
None — and nothing was imported — when the API is not installed.

Producer side (`producing`): an enqueue made inside a valid span gets a PRODUCER span
`send <job_type>` whose W3C context (`traceparent`, `tracestate`) is kept beside the new
jobs. Consumer side (`consuming`): when a real tracer provider is configured, each
attempt runs under a CONSUMER span `process <job_type>` — a child of the kept context, or
linked to it when the job waited longer than `JOBDESK_TRACE_LINK_AFTER_SECONDS` (a span
that starts days after its parent makes the request's trace unreadable). Attributes
follow the messaging semantic conventions; a failed attempt's span gets an `exception`
event with the error as Jobdesk records it (masked) and status ERROR.

Metrics (`outcome_recorder`): when a real meter provider is configured in the worker,
finished attempts are also counted as OpenTelemetry metrics — `jobdesk.worker.jobs`
(attempts, by `jobdesk.job_type` and `jobdesk.outcome`) and
`jobdesk.worker.job.duration` (seconds, by `jobdesk.job_type`) — the same figures the
worker's Prometheus port serves.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any, NamedTuple

from jobdesk.shared.core.masking import mask_text

SYSTEM = "jobdesk"
TRACER_NAME = "jobdesk"
#: Outcomes of an attempt that are errors on its span (`executor.Kind` values).
ERROR_OUTCOMES = frozenset({"failed", "retry_after", "permanent", "timeout"})
#: The variable that names a tracer provider for the API to load on first use.
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"


@dataclass(frozen=True, slots=True)
class Api:
    trace: ModuleType
    propagate: ModuleType
    context: ModuleType
    metrics: ModuleType
    #: The environment names a tracer provider for the API to load on first use.
    provider_named: bool


@functools.cache
def api() -> Api | None:
    """OpenTelemetry's API modules, imported on first use; None when not installed."""
    try:
        from opentelemetry import context, metrics, propagate, trace
    except ImportError:
        return None
    return Api(trace, propagate, context, metrics, _PROVIDER_VARIABLE in os.environ)


_tracers: dict[int, tuple[Any, Any]] = {}


def _tracer(found: Api) -> Any:
    """Jobdesk's tracer from the current provider (made once per provider: the SDK's
    `get_tracer` costs as much as a third of a span)."""
    provider = found.trace.get_tracer_provider()
    cached = _tracers.get(id(provider))
    if cached is None or cached[0] is not provider:
        cached = (provider, provider.get_tracer(TRACER_NAME))
        _tracers[id(provider)] = cached
    return cached[1]


def in_span() -> bool:
    """Whether an enqueue here would be traced (cheap: no span is made)."""
    return _in_span() is not None


def _in_span() -> Api | None:
    """The API when the caller runs inside a valid span worth continuing, else None."""
    found = api()
    if found is None or not found.trace.get_current_span().get_span_context().is_valid:
        return None
    return found


@dataclass(slots=True)
class Producer:
    span: Any
    traceparent: str
    tracestate: str | None

    def sent(self, job_ids: list[int]) -> None:
        if len(job_ids) == 1:
            self.span.set_attribute("messaging.message.id", str(job_ids[0]))
        else:
            self.span.set_attribute("messaging.batch.message_count", len(job_ids))


@contextmanager
def producing(job_type: str, queue: str, count: int) -> Iterator[Producer | None]:
    """A PRODUCER span around an enqueue made inside a span (None outside one)."""
    found = _in_span()
    if found is None:
        yield None
        return
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "jobdesk.job_type": job_type,
    }
    tracer = _tracer(found)
    kind = found.trace.SpanKind.PRODUCER
    name = f"send {job_type}" if count == 1 else f"send {job_type} ({count} jobs)"
    with tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        found.propagate.inject(carrier)
        parent = carrier.get("traceparent")
        if parent is None:  # a propagator without W3C trace context: nothing to keep
            yield None
            return
        yield Producer(span, parent, carrier.get("tracestate"))


def tracing_configured() -> bool:
    """A real tracer provider is set (not the API's proxy or no-op): attempts get spans."""
    return consumer_tracer() is not None


#: (provider, Jobdesk's tracer from it, or None when it is the API's proxy or no-op): the
#: answer of `consumer_tracer` for the provider it was last asked about.
_consumer: list[tuple[Any, Any]] = [(None, None)]


def consumer_tracer() -> Any:
    """Jobdesk's tracer when a real tracer provider is configured, else None — asked once
    per attempt, so the answer is kept for the current provider (an identity check, not an
    `isinstance` and a tracer lookup each time)."""
    found = api()
    if found is None:
        return None
    provider = _set_provider(found)
    if provider is None:
        return None
    known, tracer = _consumer[0]
    if provider is known:
        return tracer
    return _new_consumer(found, provider)


#: What `_set_provider` finds when the API keeps its global under another name.
_UNREADABLE = object()


def _set_provider(found: Api) -> Any:
    """The tracer provider, or None when none is set. With none set (the API installed
    as another package's dependency, no SDK configured), `get_tracer_provider()` looks
    its variable up in the environment on every call to hand out its proxy — 1.8 µs,
    about 7 % of an untraced job. The API's global answers that in 10 ns: None with no
    variable naming a provider means the proxy; anything else goes through the API."""
    provider = getattr(found.trace, "_TRACER_PROVIDER", _UNREADABLE)
    if provider is None and not found.provider_named:
        return None
    return found.trace.get_tracer_provider()


def _new_consumer(found: Api, provider: Any) -> Any:
    trace = found.trace
    real = not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    tracer = _tracer(found) if real else None
    _consumer[0] = (provider, tracer)
    return tracer


class Attempted(NamedTuple):
    """What the consumer span says about one attempt (a NamedTuple: one is made per
    attempt, at a tenth of a frozen dataclass's cost)."""

    job_id: int
    job_type: str
    queue: str
    attempt: int


#: Per (job type, queue): the span's name and its attributes that do not change between
#: attempts (bounded by the types and queues a worker serves).
_shapes: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}


def _shape(job_type: str, queue: str) -> tuple[str, dict[str, Any]]:
    shape = _shapes.get((job_type, queue))
    if shape is None:
        shape = _shapes[job_type, queue] = (
            f"process {job_type}",
            {
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.destination.name": queue,
                "jobdesk.job_type": job_type,
            },
        )
    return shape


class Consuming:
    """The CONSUMER span of one attempt, current while the attempt runs: `__enter__`
    starts it and makes it current (a handler's webhooks and emails carry its
    `traceparent`), `__exit__` restores the context and ends it. A plain class rather
    than nested generator context managers (`start_as_current_span`, `use_span`): the
    same calls, without their per-attempt overhead."""

    __slots__ = ("_found", "_span", "_token")

    def __init__(self, found: Api, span: Any) -> None:
        self._found = found
        self._span = span
        self._token: Any = None

    def __enter__(self) -> Any:
        found = self._found
        self._token = found.context.attach(found.trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._found.context.detach(self._token)
        finally:
            self._span.end()


def consuming(
    attempted: Attempted,
    kept: tuple[str, str | None, datetime] | None,
    *,
    now: Callable[[], datetime],
    link_after_seconds: float,
    tracer: Any = None,
) -> Consuming:
    """A CONSUMER span `process <job_type>` for one attempt (see the module); `now` is
    read only when the job has a kept context (to choose between parent and link)."""
    found = api()
    assert found is not None
    trace = found.trace
    parent: Any = None
    links: Sequence[Any] = ()
    if kept is not None:
        carrier: Mapping[str, str] = {"traceparent": kept[0]} | (
            {"tracestate": kept[1]} if kept[1] else {}
        )
        extracted = found.propagate.extract(carrier)
        if now() - kept[2] <= timedelta(seconds=link_after_seconds):
            parent = extracted
        else:
            linked = trace.get_current_span(extracted).get_span_context()
            if linked.is_valid:
                links = [trace.Link(linked)]
    name, common = _shape(attempted.job_type, attempted.queue)
    attributes = common.copy()
    attributes["messaging.message.id"] = str(attempted.job_id)
    attributes["jobdesk.attempt"] = attempted.attempt
    span = (tracer or _tracer(found)).start_span(
        name,
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )
    return Consuming(found, span)


def conclude(span: Any, kind: str, error_type: str | None, error: str | None) -> None:
    """Write an attempt's outcome on its span: the outcome, and for a failure an
    `exception` event (the masked error Jobdesk records) and status ERROR."""
    span.set_attribute("jobdesk.outcome", kind)
    if kind in ERROR_OUTCOMES:
        found = api()
        assert found is not None
        message = mask_text(error or kind)
        span.add_event(
            "exception",
            {"exception.type": error_type or kind, "exception.message": message},
        )
        first_line = message.split("\n", 1)[0][:200]
        span.set_status(found.trace.Status(found.trace.StatusCode.ERROR, first_line))


def inject_headers(headers: dict[str, str]) -> None:
    """Add `traceparent` (and `tracestate`) of the current span to outgoing headers."""
    found = _in_span()
    if found is not None:
        found.propagate.inject(headers)


def outcome_recorder() -> Callable[[Sequence[tuple[str, str, float]]], None] | None:
    """`record(finished)` counting finished attempts — `(job_type, outcome, seconds)` of
    each attempt of a written batch — as OpenTelemetry metrics, when a real meter provider
    is configured; None otherwise (nothing to do). The counter is added to once per job
    type and outcome of the batch (the same sums as once per attempt, at a fraction of the
    cost: each call builds a measurement and copies its attributes); the histogram gets
    one measurement per attempt, as its buckets need."""
    found = api()
    if found is None:
        return None
    metrics = found.metrics
    provider = metrics.get_meter_provider()
    if isinstance(provider, metrics.NoOpMeterProvider) or type(provider).__name__ == (
        "_ProxyMeterProvider"
    ):
        return None
    meter = provider.get_meter(TRACER_NAME)
    attempts = meter.create_counter(
        "jobdesk.worker.jobs", unit="{attempt}", description="Job attempts finished"
    )
    duration = meter.create_histogram(
        "jobdesk.worker.job.duration", unit="s", description="Duration of job attempts"
    )

    def record(finished: Sequence[tuple[str, str, float]]) -> None:
        counts: dict[tuple[str, str], int] = {}
        by_type: dict[str, dict[str, str]] = {}
        for job_type, outcome, seconds in finished:
            key = (job_type, outcome)
            counts[key] = counts.get(key, 0) + 1
            attributes = by_type.get(job_type)
            if attributes is None:  # the SDK copies them: one dict serves the batch
                attributes = by_type[job_type] = {"jobdesk.job_type": job_type}
            duration.record(max(0.0, seconds), attributes)
        for (job_type, outcome), count in counts.items():
            attempts.add(count, {"jobdesk.job_type": job_type, "jobdesk.outcome": outcome})

    return record
