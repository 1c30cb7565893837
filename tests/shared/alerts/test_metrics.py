"""`/metrics` parses as Prometheus text and reports what the database holds."""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from jobdesk.dashboard import create_app, metrics
from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.settings import Settings
from tests.factories import env_settings, make_job
from tests.shared.alerts.helpers import add_breaker, add_worker, dead_jobs


def app_for(engine: sa.Engine, **extra: str) -> Flask:
    app = Flask(__name__)
    app.register_blueprint(metrics.bp)
    metrics.init_metrics(app, engine, env_settings(extra))
    return app


def scrape(app: Flask) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_report_the_database(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        make_job(conn, queue="email", next_run_at=now - timedelta(seconds=120))
        make_job(conn, queue="email", next_run_at=now - timedelta(seconds=5))
        make_job(conn, queue="email", next_run_at=now + timedelta(hours=1))
        make_job(conn, queue="email", status="succeeded")
        dead_jobs(conn, 3, endpoint="crm", finished=now)
        dead_jobs(conn, 1, endpoint="crm", finished=now, resolution="ignored", resolved_by="a")
        conn.execute(sa.insert(alerts).values(rule="dead_letter_spike", subject="x", message="m"))
        add_breaker(conn, "webhook:crm", state="open", opened=now)
        add_worker(conn, "w1", queues=None, job_types=None, seen=now)
        add_worker(conn, "w2", queues=None, job_types=None, seen=now - timedelta(hours=1))
    samples = scrape(app_for(engine))

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("jobdesk_jobs", queue="email", status="queued") == 3
    assert value("jobdesk_jobs", queue="email", status="succeeded") == 1
    assert value("jobdesk_jobs", queue="email", status="running") == 0
    assert value("jobdesk_jobs", queue="default", status="dead") == 4
    assert value("jobdesk_jobs_due", queue="email") == 2
    assert 119 <= value("jobdesk_oldest_due_job_age_seconds", queue="email") < 180
    assert value("jobdesk_dead_letters", job_type="webhook.deliver") == 3
    assert value("jobdesk_alerts_open", rule="dead_letter_spike") == 1
    assert value("jobdesk_alerts_open", rule="queue_stalled") == 0
    assert value("jobdesk_circuit_breaker_state", key="webhook:crm", state="open") == 1
    assert value("jobdesk_circuit_breaker_state", key="webhook:crm", state="closed") == 0
    assert value("jobdesk_workers_live") == 1
    assert value("jobdesk_worker_slots_live") == 4
    assert value("jobdesk_metrics_query_seconds") >= 0


def test_metrics_token_is_required_when_configured(engine: sa.Engine) -> None:
    client = app_for(engine, metrics_token="s3cret").test_client()
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert b"jobdesk_jobs" in ok.data


def test_database_trouble_is_a_503_not_a_crash(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}", settings=Settings())
    try:
        response = app_for(engine).test_client().get("/metrics")
    finally:
        engine.dispose()
    assert response.status_code == 503
    assert response.get_data(as_text=True) == "metrics: database unavailable\n"


def test_works_inside_the_dashboard_app_with_its_read_engine(engine: sa.Engine) -> None:
    settings = Settings(secret_key=secrets.token_urlsafe(48))
    app = create_app(settings, engine)  # the factory registers /metrics
    with engine.begin() as conn:
        make_job(conn, queue="email")
    samples = scrape(app)
    assert samples[("jobdesk_jobs", (("queue", "email"), ("status", "queued")))] == 1


def test_without_a_token_only_loopback_clients_are_answered(engine: sa.Engine) -> None:
    settings = Settings(secret_key=secrets.token_urlsafe(48))
    client = create_app(settings, engine).test_client()
    remote = client.get("/metrics", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert remote.status_code == 403
    assert "JOBDESK_METRICS_TOKEN" in remote.get_data(as_text=True)
    assert client.get("/metrics", environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 200
