"""Worker-local Prometheus metrics: what THIS process ran, how it ended, how long it took.

The queue-wide figures (depth, oldest due job, dead letters, alerts) come from the
database via the dashboard's `/metrics`; these counters are per process and only
visible on the optional metrics port (`--metrics-port` / `JOBDESK_WORKER_METRICS_PORT`,
bound to `JOBDESK_WORKER_METRICS_HOST`, default 127.0.0.1 — not exposed by accident).

The runner calls `record_outcomes(finished)` with each written batch of finished attempts
(`record_outcome(job_type, outcome, seconds)` for each)
and `start_metrics_server(port, host)` at start-up when a port is configured.

- `jobdesk_worker_jobs_total{job_type, outcome}` — attempts finished (outcome:
  succeeded, failed, dead, timeout, snoozed, released, …); jobs run = the sum.
- `jobdesk_worker_job_duration_seconds{job_type}` — histogram of attempt durations.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from jobdesk.shared.settings import Settings

DEFAULT_HOST = "127.0.0.1"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LABEL_CHARS = 100


class WorkerMetrics:
    """One process's counters in a registry of their own (never the global default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.jobs = Counter(
            "jobdesk_worker_jobs",
            "Job attempts finished by this worker process, by type and outcome",
            ["job_type", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "jobdesk_worker_job_duration_seconds",
            "Duration of job attempts run by this worker process",
            ["job_type"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )

    def record_outcome(self, job_type: str, outcome: str, seconds: float) -> None:
        job_type = job_type[:_LABEL_CHARS]
        self.jobs.labels(job_type=job_type, outcome=outcome[:_LABEL_CHARS]).inc()
        self.duration.labels(job_type=job_type).observe(max(0.0, seconds))


_lock = threading.Lock()
_default: list[WorkerMetrics] = []


def worker_metrics() -> WorkerMetrics:
    """This process's metrics (created on first use, not at import)."""
    with _lock:
        if not _default:
            _default.append(WorkerMetrics())
        return _default[0]


def record_outcome(job_type: str, outcome: str, seconds: float) -> None:
    """Count one finished attempt of `job_type` that ended in `outcome` after `seconds`."""
    worker_metrics().record_outcome(job_type, outcome, seconds)


def record_outcomes(finished: Sequence[tuple[str, str, float]]) -> None:
    """`record_outcome` for each (job_type, outcome, seconds) of a written batch."""
    metrics = worker_metrics()
    for job_type, outcome, seconds in finished:
        metrics.record_outcome(job_type, outcome, seconds)


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_metrics_server(
    port: int, host: str = DEFAULT_HOST, metrics: WorkerMetrics | None = None
) -> MetricsServer:
    """Serve the metrics over HTTP on a daemon thread (`port=0` picks a free port)."""
    registry = (metrics or worker_metrics()).registry
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread)


def metrics_address(settings: Settings) -> tuple[str, int] | None:
    """(host, port) from `JOBDESK_WORKER_METRICS_PORT` / `_HOST`; None when no port is set."""
    if settings.worker_metrics_port is None:
        return None
    return settings.worker_metrics_host or DEFAULT_HOST, settings.worker_metrics_port
