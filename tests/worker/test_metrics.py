"""`jobdesk worker --metrics-port`: a real worker process serves its own Prometheus
metrics — attempts finished by type and outcome, and their durations."""

from __future__ import annotations

import re
import socket

import httpx
import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from tests.worker.procs import Workers, all_done, wait_for

pytestmark = pytest.mark.slow


def add(engine: sa.Engine, job_type: str, payload: dict[str, object] | None = None) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload or {})


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text format (labels in any order)."""
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if not match or match[1] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match[2]))
        if found == labels:
            return float(match[3])
    return None


def test_worker_serves_its_metrics(engine: sa.Engine, procs: Workers) -> None:
    for i in range(3):
        add(engine, "t.effect", {"key": f"m{i}"})
    add(engine, "t.permanent")
    worker = procs.start("--metrics-port", "0")
    wait_for(lambda: all_done(engine, 4, ("succeeded", "dead")), 20)
    port = int(
        wait_for(lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/", worker.log()), 5)[1]
    )

    def scraped() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        done = sample(text, "jobdesk_worker_jobs_total", job_type="t.permanent", outcome="dead")
        return text if done else None  # the completer records after the commit

    text = wait_for(scraped, 10)
    assert sample(text, "jobdesk_worker_jobs_total", job_type="t.effect", outcome="succeeded") == 3
    assert sample(text, "jobdesk_worker_jobs_total", job_type="t.permanent", outcome="dead") == 1
    count = sample(text, "jobdesk_worker_job_duration_seconds_count", job_type="t.effect")
    assert count == 3
    assert worker.stop() == 0
    with pytest.raises(httpx.ConnectError):  # the server stopped with the worker
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_metrics_port_from_the_environment_and_busy_port(engine: sa.Engine, procs: Workers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        worker = procs.start(env={"JOBDESK_WORKER_METRICS_PORT": str(busy)}, wait_ready=False)
        assert worker.proc.wait(20) == 1
    log = worker.log()
    assert f"cannot listen on 127.0.0.1:{busy}" in log
    assert "Traceback" not in log


def test_no_metrics_server_unless_asked(engine: sa.Engine, procs: Workers) -> None:
    worker = procs.start()
    assert "metrics on" not in worker.log()
    assert worker.stop() == 0
