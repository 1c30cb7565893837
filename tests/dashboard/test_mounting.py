"""The dashboard inside a host Flask app, and the statement deadline on both databases."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard import init_dashboard
from jobdesk.dashboard.state import Identity
from jobdesk.shared.operator.queries.jobs import statement_deadline
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import SECRET, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database


def test_mounted_under_a_prefix_with_the_host_apps_identity(
    settings: Settings, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    host = Flask("host")
    host.secret_key = SECRET
    who: dict[str, Identity | None] = {"user": None}

    @host.get("/")
    def home() -> str:
        return "host home"

    init_dashboard(
        host,
        settings=settings,
        engine=engine,
        url_prefix="/ops/jobs",
        identity_loader=lambda: who["user"],
    )
    client = host.test_client()
    assert client.get("/").get_data(as_text=True) == "host home"
    assert "Content-Security-Policy" not in client.get("/").headers
    assert client.get("/ops/jobs/").status_code == 303
    who["user"] = Identity("host-user", "viewer", "host")
    page = client.get(f"/ops/jobs/jobs/{job_id}")
    assert page.status_code == 200
    assert 'href="/ops/jobs/static/dashboard.css"' in page.get_data(as_text=True)
    assert "Content-Security-Policy" in page.headers
    assert client.post(f"/ops/jobs/jobs/{job_id}/retry").status_code == 403
    who["user"] = Identity("host-admin", "operator", "host")
    token_page = client.get("/ops/jobs/").get_data(as_text=True)
    token = token_page.split('name="csrf-token" content="')[1].split('"')[0]
    response = client.post(
        f"/ops/jobs/jobs/{job_id}/retry",
        data={"csrf_token": token, "next": "https://evil.example/"},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"/ops/jobs/jobs/{job_id}"


def test_statement_deadline_interrupts_a_slow_query(engine: sa.Engine) -> None:
    if engine.dialect.name == "postgresql":
        slow = sa.text("SELECT pg_sleep(2)")
    else:
        slow = sa.text(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000000)"
            " SELECT count(*) FROM n"
        )
    started = time.monotonic()
    with (
        engine.connect() as conn,
        pytest.raises(sa.exc.OperationalError),
        statement_deadline(conn, 0.2),
    ):
        conn.execute(slow)
    assert time.monotonic() - started < 1.9
    with engine.connect() as conn, statement_deadline(conn, 5):
        assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
