"""OpenTelemetry traces across the queue: an enqueue inside a span emits a PRODUCER span
and keeps its context beside the job; the attempt runs under a CONSUMER span in that
trace (a child, or a link once the job waited too long), failures are errors with the
masked error; webhooks and emails carry `traceparent`; without OpenTelemetry nothing of
it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.settings import Settings
from jobdesk.shared.tracing.models import job_traces
from jobdesk.shared.tracing.otel import consumer_tracer, inject_headers, outcome_recorder
from jobdesk.shared.tracing.store import trace_of, traces_of
from jobdesk.worker.config import WorkerConfig
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry
from jobdesk.worker.registry import job as job_decorator
from jobdesk.worker.runner import Runner
from jobdesk.worker.testing import drain
from tests.otel_sdk import in_memory_metrics, in_memory_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


def crm_registry(*, fail: bool = False) -> Registry:
    reg = Registry()

    @job_decorator("crm.sync", target=reg, queue="crm", max_attempts=1)
    def sync(payload: dict[str, Any], ctx: JobContext) -> None:
        if fail:
            raise ValueError("CRM said 401 for token=abc123secret")

    return reg


def by_name(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_the_attempt_continues_the_trace_of_the_request_that_enqueued_it(
    engine: sa.Engine, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("POST /signup") as request, engine.begin() as conn:
        job_id = enqueue(conn, "crm.sync", {"account": 42}, queue="crm")
    with engine.connect() as conn:
        (kept,) = conn.execute(sa.select(job_traces)).all()
    assert kept.job_id == job_id
    assert kept.traceparent.split("-")[1] == f"{request.get_span_context().trace_id:032x}"

    drain(engine, registry=crm_registry(), settings=Settings.from_env())
    found = by_name(spans)
    send, process = found["send crm.sync"], found["process crm.sync"]
    assert send.kind is SpanKind.PRODUCER
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.attributes["messaging.system"] == "jobdesk"
    assert send.attributes["messaging.destination.name"] == "crm"
    assert send.attributes["messaging.message.id"] == str(job_id)
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == request.get_span_context().trace_id
    assert process.parent.span_id == send.context.span_id
    assert dict(process.attributes) == {
        "messaging.system": "jobdesk",
        "messaging.operation.type": "process",
        "messaging.destination.name": "crm",
        "messaging.message.id": str(job_id),
        "jobdesk.job_type": "crm.sync",
        "jobdesk.attempt": 1,
        "jobdesk.outcome": "succeeded",
    }
    assert process.status.status_code is StatusCode.UNSET


def test_a_failed_attempt_is_an_error_with_the_masked_error(
    engine: sa.Engine, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("app").start_as_current_span("cron"), engine.begin() as conn:
        enqueue(conn, "crm.sync", {}, queue="crm")
    drain(engine, registry=crm_registry(fail=True), settings=Settings.from_env())
    process = by_name(spans)["process crm.sync"]
    assert process.status.status_code is StatusCode.ERROR
    assert process.attributes["jobdesk.outcome"] == "failed"
    (event,) = process.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert "abc123secret" not in event.attributes["exception.message"]
    assert "token=***" in event.attributes["exception.message"]


def test_outside_a_span_nothing_is_kept_and_the_attempt_starts_a_trace(
    engine: sa.Engine, spans: InMemorySpanExporter
) -> None:
    with engine.begin() as conn:
        enqueue_many(
            conn, [NewJob("crm.sync", {}, queue="crm"), NewJob("crm.sync", {}, queue="crm")]
        )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(job_traces)).scalar() == 0
    drain(engine, registry=crm_registry(), settings=Settings.from_env())
    names = [span.name for span in spans.get_finished_spans()]
    assert names == ["process crm.sync", "process crm.sync"]
    assert all(span.parent is None for span in spans.get_finished_spans())


def test_a_job_that_waited_too_long_links_to_its_trace_instead(
    engine: sa.Engine, spans: InMemorySpanExporter
) -> None:
    importing = trace.get_tracer("app").start_as_current_span("import")
    with importing as request, engine.begin() as conn:
        enqueue_many(conn, [NewJob("crm.sync", {"n": n}, queue="crm") for n in range(3)])
    settings = replace(Settings.from_env(), trace_link_after_seconds=0)
    drain(engine, registry=crm_registry(), settings=settings)
    batch = by_name(spans)["send crm.sync (3 jobs)"]
    assert batch.attributes["messaging.batch.message_count"] == 3
    processes = [s for s in spans.get_finished_spans() if s.name == "process crm.sync"]
    assert len(processes) == 3
    for process in processes:
        assert process.parent is None
        assert process.context.trace_id != request.get_span_context().trace_id
        (link,) = process.links
        assert link.context.span_id == batch.context.span_id


def test_kept_contexts_are_read_for_a_whole_batch_at_once(
    engine: sa.Engine, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("app").start_as_current_span("import"), engine.begin() as conn:
        traced = enqueue_many(conn, [NewJob("crm.sync", {"n": n}, queue="crm") for n in range(3)])
    with engine.begin() as conn:
        plain = enqueue_many(conn, [NewJob("crm.sync", {"n": n}, queue="crm") for n in range(2)])
    with engine.connect() as conn:
        assert traces_of(conn, []) == {}
        for ids in (traced + plain, plain, traced[:1] + plain, [*traced, *plain, 10**12]):
            found = traces_of(conn, ids)
            assert sorted(found) == sorted(set(ids) & set(traced))
            assert all(found[i] == trace_of(conn, i) for i in found)


def test_a_worker_runs_each_claimed_job_in_its_kept_trace(
    engine: sa.Engine, db_url: str, spans: InMemorySpanExporter
) -> None:
    """The worker reads the kept contexts with its claim; the span is current in the
    handler (what its webhooks carry)."""
    seen: dict[int, dict[str, str]] = {}
    reg = Registry()

    @job_decorator("crm.sync", target=reg, queue="crm", max_attempts=1)
    def sync(payload: dict[str, Any], ctx: JobContext) -> None:
        headers: dict[str, str] = {}
        inject_headers(headers)
        seen[ctx.job_id] = headers

    with trace.get_tracer("app").start_as_current_span("import"), engine.begin() as conn:
        traced = enqueue_many(conn, [NewJob("crm.sync", {"n": n}, queue="crm") for n in range(3)])
    with engine.begin() as conn:
        plain = enqueue_many(conn, [NewJob("crm.sync", {"n": n}, queue="crm") for n in range(2)])
    settings = replace(Settings.from_env(), database_url=db_url, poll_interval_seconds=0.05)
    runner = Runner(
        engine,
        registry=reg,
        config=WorkerConfig.build(settings, concurrency=5),
        settings=settings,
        install_signals=False,
    )
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(seen) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.request_stop()
        thread.join(20)
    batch = by_name(spans)["send crm.sync (3 jobs)"]
    processes = {
        int(s.attributes["messaging.message.id"]): s
        for s in spans.get_finished_spans()
        if s.name == "process crm.sync"
    }
    assert sorted(processes) == sorted(traced + plain)
    for job_id, process in processes.items():
        assert process.kind is SpanKind.CONSUMER
        assert process.attributes["jobdesk.outcome"] == "succeeded"
        if job_id in traced:
            assert process.parent.span_id == batch.context.span_id
            assert process.context.trace_id == batch.context.trace_id
        else:
            assert process.parent is None
        trace_id = f"{process.context.trace_id:032x}"
        span_id = f"{process.context.span_id:016x}"
        assert seen[job_id]["traceparent"].split("-")[1:3] == [trace_id, span_id]


def test_outgoing_webhooks_and_emails_carry_traceparent(spans: InMemorySpanExporter) -> None:
    from jobdesk.worker.jobs.email import RenderedEmail, build_message

    headers: dict[str, str] = {}
    inject_headers(headers)
    assert headers == {}, "outside a span: nothing"
    with trace.get_tracer("worker").start_as_current_span("process webhook.deliver") as span:
        inject_headers(headers)
        rendered = RenderedEmail("welcome", "1", "Hi", "text", None)
        mail = build_message(rendered, sender="a@example.com", to="b@example.com", msg_id="<1@x>")
    trace_id = f"{span.get_span_context().trace_id:032x}"
    assert headers["traceparent"].split("-")[1] == trace_id
    assert mail["traceparent"].split("-")[1] == trace_id


def test_finished_attempts_are_counted_as_opentelemetry_metrics() -> None:
    with in_memory_metrics() as reader:
        record = outcome_recorder()
        assert record is not None
        record([("crm.sync", "succeeded", 0.2), ("crm.sync", "failed", 0.5)])
        record([("crm.sync", "succeeded", 0.1), ("mail", "succeeded", -1.0)])
        record([])
        data = reader.get_metrics_data()
    assert data is not None
    found = {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    counted = {
        tuple(sorted(point.attributes.items())): point.value
        for point in found["jobdesk.worker.jobs"].data.data_points
    }
    assert counted == {
        (("jobdesk.job_type", "crm.sync"), ("jobdesk.outcome", "succeeded")): 2,
        (("jobdesk.job_type", "crm.sync"), ("jobdesk.outcome", "failed")): 1,
        (("jobdesk.job_type", "mail"), ("jobdesk.outcome", "succeeded")): 1,
    }
    durations = {
        dict(point.attributes)["jobdesk.job_type"]: (point.count, round(point.sum, 6))
        for point in found["jobdesk.worker.job.duration"].data.data_points
    }
    assert durations == {"crm.sync": (3, 0.8), "mail": (1, 0.0)}
    assert found["jobdesk.worker.job.duration"].unit == "s"


def test_without_opentelemetry_nothing_of_it_is_imported(tmp_path: Any) -> None:
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # as if it were not installed
import sqlalchemy as sa
from jobdesk import enqueue
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
engine = make_engine("sqlite:///{tmp_path}/plain.db")
upgrade(engine)
reg = Registry()
job("crm.sync", target=reg, queue="crm")(lambda payload, ctx: None)
with engine.begin() as conn:
    enqueue(conn, "crm.sync", {{}}, queue="crm")
assert drain(engine, registry=reg).by_kind == {{"succeeded": 1}}
loaded = [name for name in sys.modules if name.startswith("opentelemetry.")]
assert loaded == [], loaded
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_attempts_see_the_provider_set_now_and_none_without_one() -> None:
    assert consumer_tracer() is None  # the API installed, no provider set: no spans
    with in_memory_spans():
        assert consumer_tracer() is not None
    assert consumer_tracer() is None


def test_a_provider_named_in_the_environment_is_loaded_through_the_api() -> None:
    script = (
        "from jobdesk.shared.tracing.otel import consumer_tracer\n"
        "print(type(consumer_tracer()).__module__)\n"
    )
    env = {**os.environ, "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        check=False, env=env,
    )  # fmt: skip
    assert done.stdout.strip() == "opentelemetry.sdk.trace", done.stderr
