"""`/metrics`: Prometheus text computed from the database at scrape time.

Nothing is counted in the web process: each scrape runs a handful of aggregate queries
(`jobdesk.shared.operator.queries.metrics`) through a custom collector, so every
gunicorn worker answers with the same, current numbers — no multiprocess directory, no
per-process drift.

Registration (done by the app factory)::

    from dashboard import metrics
    app.register_blueprint(metrics.bp)
    metrics.init_metrics(app, engine)   # optional: else the dashboard's read engine

Access fails closed: with `JOBDESK_METRICS_TOKEN` set, scrapes need
`Authorization: Bearer <token>`; without it, only loopback clients (a Prometheus agent
or proxy on the same host) are answered, and only for a Host that cannot be a rebound
DNS name (an IP literal, `localhost`, or `JOBDESK_ALLOWED_HOSTS`).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from datetime import datetime

import sqlalchemy as sa
from flask import Blueprint, Flask, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobdesk.dashboard.auth import public
from jobdesk.dashboard.security import rebinding_safe
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.limits.models import BreakerState
from jobdesk.shared.operator.queries.metrics import (
    breaker_states,
    counts_by_queue_status,
    due_backlog,
    live_after,
    live_workers,
    open_alerts_by_rule,
    unresolved_dead_by_type,
)
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings.alerts import RULE_TYPES

bp = Blueprint("metrics", __name__)

EXTENSION_KEY = "jobdesk_metrics"
LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})
BREAKER_STATES = tuple(BreakerState)


class DatabaseCollector(Collector):
    """Yields the queue's gauges from one short read transaction."""

    def __init__(self, engine: sa.Engine, heartbeat_seconds: float) -> None:
        self.engine = engine
        self.heartbeat_seconds = heartbeat_seconds

    def collect(self) -> Iterator[GaugeMetricFamily]:
        started = time.perf_counter()
        with self.engine.connect() as conn:
            now = db_now(conn)
            families = list(self._families(conn, now))
            conn.rollback()
        took = GaugeMetricFamily(
            "jobdesk_metrics_query_seconds", "Time spent querying the database for this scrape"
        )
        took.add_metric([], time.perf_counter() - started)
        yield from families
        yield took

    def _families(self, conn: sa.Connection, now: datetime) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "jobdesk_jobs", "Jobs by queue and status", labels=["queue", "status"]
        )
        counts = counts_by_queue_status(conn)
        for queue in sorted({queue for queue, _ in counts}):
            for status in JobStatus:
                depth.add_metric([queue, status.value], counts.get((queue, status.value), 0))
        yield depth

        due = GaugeMetricFamily(
            "jobdesk_jobs_due", "Jobs due to run now (queued or failed)", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "jobdesk_oldest_due_job_age_seconds",
            "How long the oldest due job of each queue has waited",
            labels=["queue"],
        )
        for row in due_backlog(conn, now):
            due.add_metric([row.queue], row.due)
            oldest.add_metric([row.queue], row.oldest_age_seconds)
        yield due
        yield oldest

        dead = GaugeMetricFamily(
            "jobdesk_dead_letters",
            "Dead jobs without a resolution (waiting for triage), by type",
            labels=["job_type"],
        )
        for job_type, n in sorted(unresolved_dead_by_type(conn).items()):
            dead.add_metric([job_type], n)
        yield dead

        alerts = GaugeMetricFamily("jobdesk_alerts_open", "Open alerts by rule", labels=["rule"])
        by_rule = open_alerts_by_rule(conn)
        for rule in sorted(set(RULE_TYPES) | set(by_rule)):
            alerts.add_metric([rule], by_rule.get(rule, 0))
        yield alerts

        breakers = GaugeMetricFamily(
            "jobdesk_circuit_breaker_state",
            "Circuit breaker state (1 for the current state)",
            labels=["key", "state"],
        )
        for key, state in breaker_states(conn).items():
            for candidate in BREAKER_STATES:
                breakers.add_metric([key, candidate], 1 if state == candidate else 0)
        yield breakers

        live = live_workers(conn, live_after(now, self.heartbeat_seconds))
        workers = GaugeMetricFamily("jobdesk_workers_live", "Workers with a recent heartbeat")
        workers.add_metric([], len(live))
        yield workers
        slots = GaugeMetricFamily(
            "jobdesk_worker_slots_live", "Job slots (concurrency) of live workers"
        )
        slots.add_metric([], sum(w.concurrency for w in live))
        yield slots


def init_metrics(app: Flask, engine: sa.Engine, settings: Settings | None = None) -> None:
    """Give the blueprint its engine (when not using the dashboard's own state)."""
    app.extensions[EXTENSION_KEY] = {"engine": engine, "settings": settings}


def _engine_and_settings() -> tuple[sa.Engine, Settings]:
    own = current_app.extensions.get(EXTENSION_KEY)
    dashboard = current_app.extensions.get("jobdesk")
    settings: Settings | None = None
    engine: sa.Engine | None = None
    if own:
        engine, settings = own["engine"], own.get("settings")
    if dashboard is not None:
        engine = engine or getattr(dashboard, "read_engine", None)
        settings = settings or getattr(dashboard, "settings", None)
    if engine is None:
        raise RuntimeError("metrics: call init_metrics(app, engine) or set up the dashboard")
    return engine, settings or Settings.from_env()


@bp.get("/metrics")
@public  # not an operator page: guarded by the bearer token / loopback check below
def metrics() -> Response:
    engine, settings = _engine_and_settings()
    token = settings.metrics_token
    if not token and request.remote_addr not in LOOPBACK_ADDRESSES:
        return Response(
            "metrics: set JOBDESK_METRICS_TOKEN to allow scrapes from other hosts\n",
            status=403,
            mimetype="text/plain",
        )
    if not token and not rebinding_safe(request.host, settings.allowed_hosts):
        # A browser page whose DNS name was rebound to 127.0.0.1 is "loopback" too.
        return Response(
            "metrics: unknown Host; scrape 127.0.0.1/localhost, list the name in "
            "JOBDESK_ALLOWED_HOSTS, or set JOBDESK_METRICS_TOKEN\n",
            status=403,
            mimetype="text/plain",
        )
    if token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return Response(
                "metrics: missing or wrong bearer token\n",
                status=401,
                mimetype="text/plain",
                headers={"WWW-Authenticate": 'Bearer realm="jobdesk-metrics"'},
            )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(engine, settings.heartbeat_seconds))
    try:
        body = generate_latest(registry)
    except sa.exc.SQLAlchemyError as exc:
        current_app.logger.warning(
            "metrics scrape failed: %s", exc, extra={"action": "metrics_failed"}
        )
        return Response("metrics: database unavailable\n", status=503, mimetype="text/plain")
    return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})
