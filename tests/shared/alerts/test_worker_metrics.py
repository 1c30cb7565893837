"""Worker-local counters and histograms, served on a loopback port."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.worker.metrics import WorkerMetrics, metrics_address, start_metrics_server
from tests.factories import env_settings


def test_outcomes_are_counted_and_served_over_http() -> None:
    metrics = WorkerMetrics()
    metrics.record_outcome("email.send", "succeeded", 0.2)
    metrics.record_outcome("email.send", "succeeded", 0.3)
    metrics.record_outcome("email.send", "dead", 1.5)
    metrics.record_outcome("webhook.deliver", "failed", 12.0)
    server = start_metrics_server(0, metrics=metrics)
    try:
        response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    finally:
        server.stop()
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    jobs = "jobdesk_worker_jobs_total"
    assert samples[(jobs, (("job_type", "email.send"), ("outcome", "succeeded")))] == 2
    assert samples[(jobs, (("job_type", "email.send"), ("outcome", "dead")))] == 1
    assert samples[(jobs, (("job_type", "webhook.deliver"), ("outcome", "failed")))] == 1
    hist = "jobdesk_worker_job_duration_seconds"
    assert samples[(hist + "_count", (("job_type", "email.send"),))] == 3
    assert samples[(hist + "_sum", (("job_type", "email.send"),))] == pytest.approx(2.0)
    le_1 = (hist + "_bucket", (("job_type", "email.send"), ("le", "1.0")))
    assert samples[le_1] == 2


def test_metrics_address_from_settings() -> None:
    assert metrics_address(Settings()) is None
    assert metrics_address(env_settings({"worker_metrics_port": "9109"})) == ("127.0.0.1", 9109)
    both = env_settings({"worker_metrics_port": "9109", "worker_metrics_host": "0.0.0.0"})
    assert metrics_address(both) == ("0.0.0.0", 9109)
    with pytest.raises(SettingsError, match="JOBDESK_WORKER_METRICS_PORT"):
        env_settings({"worker_metrics_port": "http"})
    with pytest.raises(SettingsError, match="<= 65535"):
        env_settings({"worker_metrics_port": "70000"})
