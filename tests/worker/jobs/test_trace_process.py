"""One trace from the app's request to a real worker process (its OpenTelemetry SDK set
up from the standard `OTEL_*` environment by `opentelemetry-instrument`) and on to the
webhook receiver, which sees `traceparent` of that trace; the worker's metrics come out
of the same SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace

from jobdesk import enqueue
from jobdesk.shared.core.models import jobs
from tests.otel_sdk import in_memory_spans
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.one_database, pytest.mark.usefixtures("jobs_env")]

BIN = Path(sys.executable).parent


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (indented JSON objects) among log lines."""
    found, block = [], []
    for line in text.splitlines():
        if line == "{":
            block = [line]
        elif block:
            block.append(line)
            if line == "}":
                found.append(json.loads("\n".join(block)))
                block = []
    return found


def test_the_request_the_worker_and_the_receiver_share_one_trace(
    engine: sa.Engine, db_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/ok")))
    payload = {"endpoint": "crm", "event": "user.created", "data": {"user_id": 1}}
    with in_memory_spans() as exported:
        signup = trace.get_tracer("app").start_as_current_span("POST /signup")
        with signup as request, engine.begin() as conn:
            job_id = enqueue(conn, "webhook.deliver", payload)
        (send,) = [s for s in exported.get_finished_spans() if s.name == "send webhook.deliver"]
    trace_id = f"{request.get_span_context().trace_id:032x}"

    env = {
        **os.environ,
        "JOBDESK_DATABASE_URL": db_url,
        "OTEL_SERVICE_NAME": "jobdesk-worker",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "OTEL_LOGS_EXPORTER": "none",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [str(BIN / "opentelemetry-instrument"), str(BIN / "jobdesk"), "worker",
             "--poll-interval", "0.1"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                status = conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar()
            if status == "succeeded":
                break
            time.sleep(0.1)
        assert status == "succeeded", log_path.read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0, log_path.read_text()[-3000:]

    (seen,) = receiver.seen
    assert seen.traceparent.split("-")[1] == trace_id
    (process,) = [
        s for s in console_spans(log_path.read_text()) if s.get("name") == "process webhook.deliver"
    ]
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["context"]["trace_id"] == f"0x{trace_id}"
    assert process["parent_id"] == f"0x{send.context.span_id:016x}"
    attributes = process["attributes"]
    assert attributes["messaging.system"] == "jobdesk"
    assert attributes["messaging.message.id"] == str(job_id)
    assert attributes["messaging.destination.name"] == "webhooks"
    assert attributes["jobdesk.outcome"] == "succeeded"
    # The worker's metrics, as OpenTelemetry metrics through the same SDK.
    points = [
        (metric["name"], point["attributes"], point.get("value"))
        for block in console_spans(log_path.read_text())
        for resource in block.get("resource_metrics", [])
        for scope in resource["scope_metrics"]
        for metric in scope["metrics"]
        for point in metric["data"]["data_points"]
    ]
    assert (
        "jobdesk.worker.jobs",
        {"jobdesk.job_type": "webhook.deliver", "jobdesk.outcome": "succeeded"},
        1,
    ) in points
    assert any(name == "jobdesk.worker.job.duration" for name, _, _ in points)
