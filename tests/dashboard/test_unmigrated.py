"""The dashboard on a database `jobdesk migrate` never ran on: every page, /login
included, says so — 503 naming the command, not "the database did not answer … narrow
the filters" — `/readyz` fails with that reason, and `jobdesk dashboard` says it at
start. Migrating is enough to recover: no restart. On both databases (each reports a
missing table its own way)."""

from __future__ import annotations

import html
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask

from jobdesk.dashboard import create_app
from jobdesk.demo.sinks import free_port
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.errors import NO_SCHEMA
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import SECRET

JOBDESK = Path(sys.executable).with_name("jobdesk")
PAGES = ("/", "/login", "/jobs", "/jobs/1", "/dead", "/alerts", "/queues", "/audit")


@pytest.fixture
def app(empty_db_url: str) -> Iterator[Flask]:
    application = create_app(replace(Settings(), database_url=empty_db_url, secret_key=SECRET))
    application.config["TESTING"] = True
    yield application
    application.extensions["jobdesk"].dispose()


def migrate(url: str) -> None:
    engine = make_engine(url, settings=Settings())
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def test_every_page_names_the_missing_schema(app: Flask) -> None:
    client = app.test_client()
    for path in PAGES:
        answer = client.get(path)
        assert answer.status_code == 503, path
        page = html.unescape(answer.get_data(as_text=True))
        assert "<h1>No Jobdesk schema</h1>" in page, path
        assert f"{NO_SCHEMA}." in page, path
        assert "Narrow the filters" not in page, path
    fragment = client.get("/jobs", headers={"HX-Request": "true"})
    assert fragment.status_code == 503
    assert fragment.get_data(as_text=True) == f"{NO_SCHEMA}.\n"
    assert client.get("/healthz").status_code == 200


def test_readyz_fails_with_the_reason_until_migrated(app: Flask, empty_db_url: str) -> None:
    client = app.test_client()
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.get_json() == {"status": "unavailable", "error": NO_SCHEMA}

    migrate(empty_db_url)
    assert client.get("/readyz").get_json() == {"status": "ok"}
    assert client.get("/login").status_code == 200
    assert client.get("/").status_code == 303  # to the login page, as on any database


def test_readyz_fails_on_a_schema_behind_this_version(app: Flask, empty_db_url: str) -> None:
    engine = make_engine(empty_db_url, settings=Settings())
    try:
        upgrade(engine, "jobdesk_0001")
    finally:
        engine.dispose()
    answer = app.test_client().get("/readyz")
    assert answer.status_code == 503
    assert "behind this Jobdesk's" in answer.get_json()["error"]
    assert answer.get_json()["error"].endswith("run `jobdesk migrate`")


@pytest.mark.slow
def test_jobdesk_dashboard_says_it_at_start(empty_db_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env.update(JOBDESK_DATABASE_URL=empty_db_url, JOBDESK_SECRET_KEY=SECRET, PYTHONUNBUFFERED="1")
    port = free_port()
    server = subprocess.Popen(
        [str(JOBDESK), "dashboard", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Jobdesk dashboard on "):
            line = server.stdout.readline()
            assert line, f"jobdesk dashboard exited: {lines}"
            lines.append(line.rstrip("\n"))
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        finally:
            if server.poll() is None:  # never left running for a later test to trip over
                server.kill()
                server.wait()
            if server.stdout is not None:
                server.stdout.close()
    assert lines == [
        f"{NO_SCHEMA} (until then every page answers 503)",
        f"Jobdesk dashboard on http://127.0.0.1:{port}/  (Ctrl+C to stop)",
    ]
