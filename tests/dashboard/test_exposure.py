"""What the dashboard gives away (issue 12 #15): /readyz says nothing about the database,
viewers get no server stack traces, the Origin check compares the scheme, and
loopback-only answers need a Host that cannot be a rebound DNS name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import create_app
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.settings import Settings, SettingsError
from tests.dashboard.conftest import Browser, browser_for, dead_job
from tests.factories import env_settings

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

STACK = (
    "ConnectionError: CRM refused the connection\n"
    '  File "/srv/jobdesk/venv/lib/python3.11/site-packages/jobdesk/worker/executor.py", '
    "line 120, in execute\n"
    "    result = job_type.handler(ctx, payload)\n"
    '  File "/srv/app/integrations/crm.py", line 44, in push\n'
    "    raise ConnectionError('CRM refused the connection')\n"
)


# --- /readyz ------------------------------------------------------------------------------


def test_readyz_does_not_echo_the_database_address() -> None:
    settings = replace(
        Settings(),
        database_url="postgresql+psycopg://jobdesk@db-internal.example.net:6543/jobs_prod",
        secret_key="test-secret-key-0123456789-abcdefghijklmnop",
        db_connect_timeout_seconds=1,
    )
    engine = sa.create_engine(
        "postgresql+psycopg://jobdesk@127.0.0.1:1/jobs_prod_db", connect_args={"connect_timeout": 1}
    )
    app = create_app(settings, engine)
    try:
        response = app.test_client().get("/readyz")
    finally:
        engine.dispose()
    assert response.status_code == 503
    body = response.get_data(as_text=True)
    assert response.get_json() == {"status": "unavailable"}
    for leak in ("127.0.0.1", "5432", ":1", "jobs_prod", "connection", "port"):
        assert leak not in body, leak


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io"])
def test_readyz_and_metrics_refuse_a_rebound_host_name(app: Flask, host: str) -> None:
    client = app.test_client()
    for url in ("/readyz", "/metrics"):
        response = client.get(
            url, headers={"Host": host}, environ_base={"REMOTE_ADDR": "127.0.0.1"}
        )
        assert response.status_code == 403, (url, host)
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "[::1]:8000", "10.1.2.3"])
def test_readyz_and_metrics_answer_ip_literals_and_localhost(app: Flask, host: str) -> None:
    client = app.test_client()
    for url in ("/readyz", "/metrics"):
        response = client.get(
            url, headers={"Host": host}, environ_base={"REMOTE_ADDR": "127.0.0.1"}
        )
        assert response.status_code == 200, (url, host)


def test_allowed_hosts_cover_the_probes_and_close_every_other_name(
    settings: Settings, users: None
) -> None:
    app = create_app(replace(settings, allowed_hosts=("jobs.example.com", ".ops.example")))
    try:
        client = app.test_client()
        local = {"REMOTE_ADDR": "127.0.0.1"}
        for host in ("jobs.example.com", "a.ops.example", "ops.example"):
            assert client.get("/readyz", headers={"Host": host}).status_code == 200, host
            assert client.get("/login", headers={"Host": host}).status_code == 200, host
            assert (
                client.get("/metrics", headers={"Host": host}, environ_base=local).status_code
                == 200
            )
        for host in ("evil.example", "jobs.example.com.evil.example", "xops.example"):
            assert client.get("/login", headers={"Host": host}).status_code == 400, host
            assert (
                client.get("/metrics", headers={"Host": host}, environ_base=local).status_code
                == 403
            )
    finally:
        app.extensions["jobdesk"].dispose()
    with pytest.raises(SettingsError, match="JOBDESK_ALLOWED_HOSTS"):
        env_settings(allowed_hosts="https://jobs.example.com")
    with pytest.raises(SettingsError, match="JOBDESK_ALLOWED_HOSTS"):
        env_settings(allowed_hosts="*")


def test_a_metrics_token_is_enough_against_rebinding(settings: Settings) -> None:
    app = create_app(replace(settings, metrics_token="t" * 40))
    try:
        response = app.test_client().get(
            "/metrics",
            headers={"Host": "evil.example", "Authorization": "Bearer " + "t" * 40},
            environ_base={"REMOTE_ADDR": "203.0.113.5"},
        )
        assert response.status_code == 200
    finally:
        app.extensions["jobdesk"].dispose()


# --- stack traces -------------------------------------------------------------------------


def test_viewers_get_the_error_without_the_stack(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, last_error=STACK)
        conn.execute(
            sa.insert(job_attempts).values(job_id=job_id, attempt=1, outcome="failed", error=STACK)
        )
    viewer = browser_for(app, "vera").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "CRM refused the connection" in viewer
    assert "/srv/" not in viewer
    assert "site-packages" not in viewer
    assert "job_type.handler" not in viewer
    assert "stack trace hidden" in viewer
    operator = browser_for(app, "otto").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "/srv/app/integrations/crm.py" in operator
    assert "stack trace hidden" not in operator


# --- Origin -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "base"),
    [
        ("http://localhost", "https://localhost"),  # a plain-HTTP page posting to TLS
        ("https://localhost", "http://localhost"),
        ("http://localhost:8001", "http://localhost"),
        ("ftp://localhost", "http://localhost"),
        ("localhost", "http://localhost"),
    ],
)
def test_the_origin_check_compares_scheme_and_port(
    operator: Browser, engine: sa.Engine, origin: str, base: str
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.client.post(
        f"/jobs/{job_id}/retry",
        data={"csrf_token": operator.token},
        headers={"Origin": origin},
        base_url=base,
    )
    assert response.status_code == 403
    assert "another site" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("origin", "base"),
    [
        ("https://localhost", "https://localhost"),
        ("https://localhost:443", "https://localhost"),
        ("http://LOCALHOST", "http://localhost:80"),
    ],
)
def test_the_same_origin_still_passes(
    operator: Browser, engine: sa.Engine, origin: str, base: str
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.client.post(
        f"/jobs/{job_id}/retry",
        data={"csrf_token": operator.token},
        headers={"Origin": origin},
        base_url=base,
    )
    assert response.status_code == 303, response.get_data(as_text=True)


def test_behind_a_tls_proxy_the_forwarded_scheme_counts(
    settings: Settings, engine: sa.Engine, users: None
) -> None:
    app = create_app(settings)  # loopback proxies trusted by default
    try:
        browser = browser_for(app, "otto")
        with engine.begin() as conn:
            job_id = dead_job(conn)
        response = browser.client.post(
            f"/jobs/{job_id}/retry",
            data={"csrf_token": browser.token},
            headers={"Origin": "https://localhost", "X-Forwarded-Proto": "https"},
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        )
        assert response.status_code == 303, response.get_data(as_text=True)
    finally:
        app.extensions["jobdesk"].dispose()


def test_viewers_get_a_pruned_jobs_error_without_the_stack(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    """The tombstone page of a pruned job showed viewers the whole stored error."""
    from datetime import UTC, datetime, timedelta

    from jobdesk.shared.core.states import JobStatus
    from jobdesk.shared.retention.pruning import prune_jobs_batch

    with engine.begin() as conn:
        job_id = dead_job(conn, last_error=STACK)
    operator = browser_for(app, "otto")
    assert operator.post(f"/jobs/{job_id}/ignore", {"reason": "gone"}).status_code == 303
    with engine.begin() as conn:
        later = datetime.now(UTC) + timedelta(days=1)
        assert prune_jobs_batch(conn, JobStatus.DEAD, later, now=later).deleted == 1
    viewer = browser_for(app, "vera").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "This job was pruned." in viewer
    assert "CRM refused the connection" in viewer
    assert "/srv/" not in viewer
    assert "stack trace hidden" in viewer
    assert "/srv/app/integrations/crm.py" in operator.get(f"/jobs/{job_id}").get_data(as_text=True)
