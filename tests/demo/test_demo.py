"""`jobdesk demo` as a new user meets it: start it, watch the story reach its end state,
triage the dead CRM webhooks through the dashboard over HTTP, stop it with SIGINT and
find no process left behind. Once on SQLite (the default) and once on PostgreSQL."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from jobdesk.demo.sinks import free_port, port_is_free
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from tests.conftest import IN_CI, PG_ADMIN_URL, _pg_unavailable_reason
from tests.demo.process import Browser, DemoProcess, alive, descendants, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

USERS = 3
SPEED = "5"
#: At speed 5 the CRM's five attempts take ~6 s of backoff plus five 1 s timeouts.
STORY_SECONDS = 90


def _ports() -> int:
    for _ in range(50):
        port = free_port()
        if port < 65000 and port_is_free(port + 1):
            return port
    raise AssertionError("no two adjacent free ports")


def _state(console: str) -> dict[str, Any]:
    return dict(httpx.get(f"{console}/state.json", timeout=5).json())


def _end_state(console: str) -> dict[str, Any] | None:
    """The story's end: every CRM job dead, one welcome email per user, the report
    finished, an alert open."""
    state = _state(console)
    story = state["story"] or {}
    report = story.get("report") or {}
    if (
        story.get("signed_up") == USERS
        and story.get("crm", {}).get("dead") == USERS
        and report.get("status") == "succeeded"
        and story.get("open_alerts")
        and len([m for m in state["mail"] if "oncall@" not in m["to"][0]]) >= USERS
    ):
        return state
    return None


def _crm_jobs(database_url: str) -> dict[int, dict[str, Any]]:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.retried_from_id)
                .where(jobs.c.job_type == "webhook.deliver")
                .order_by(jobs.c.id)
            )
            return {row.id: dict(row._mapping) for row in rows}
    finally:
        engine.dispose()


@pytest.fixture
def demo_pg_url() -> Iterator[str]:
    """A fresh database of its own on the shared server, dropped afterwards."""
    reason = _pg_unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"{reason} (CI requires PostgreSQL)", pytrace=False)
        pytest.skip(reason)
    name = f"jobdesk_demo_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _play_and_triage(tmp_path: Path, database_url: str | None) -> None:
    port = _ports()
    args = ["--port", str(port), "--users", str(USERS), "--speed", SPEED]
    if database_url:
        args += ["--postgres", database_url]
    started = time.monotonic()
    demo = DemoProcess(tmp_path, *args)
    browser: Browser | None = None
    try:
        dashboard = demo.printed("Dashboard:")
        console = demo.printed("Demo console:").rstrip("/")
        password = demo.printed("Password:")
        username = demo.printed("Log in as:")
        worker_pid = int(demo.printed("worker started (pid").rstrip(");"))
        children = descendants(demo.proc.pid)
        assert worker_pid in children
        url = database_url or f"sqlite:///{tmp_path / 'jobdesk-demo' / 'jobdesk.db'}"
        # The demo's folder never ends up in a repository; requests go to a log file.
        assert (tmp_path / "jobdesk-demo" / ".gitignore").read_text().splitlines()[-1] == "*"

        state = wait_for(
            "the story's end state", lambda: _end_state(console), timeout=STORY_SECONDS
        )
        dead_after = time.monotonic() - started
        print(f"story at its end state {dead_after:.1f}s after start")

        # One welcome email per user, no more, and the on-call address got the alert.
        per_recipient = Counter(to for mail in state["mail"] for to in mail["to"])
        users = [address for address in per_recipient if address != "oncall@example.com"]
        assert len(users) == USERS
        assert all(per_recipient[address] == 1 for address in users), per_recipient
        assert per_recipient["oncall@example.com"] >= 1
        assert not state["crm"]["up"]
        assert state["crm"]["applied"] == 0
        crm = _crm_jobs(url)
        assert len(crm) == USERS
        assert all(job["status"] == JobStatus.DEAD and job["attempts"] == 5 for job in crm.values())

        # Triage like support: log in, find the error, bring the CRM back, retry.
        browser = Browser(dashboard)
        assert browser.get("/").status_code in (302, 303)  # closed until logged in
        browser.login(username, password)
        found = browser.get("/jobs?status=dead&type=webhook.deliver&error=endpoint+crm")
        assert found.status_code == 200
        for job_id in crm:
            assert f"/jobs/{job_id}" in found.text
        assert "timeout" in browser.get(f"/jobs/{min(crm)}").text
        # The nightly report is a declared schedule, on the Schedules page.
        assert "demo.nightly_signups" in browser.get("/schedules").text

        assert httpx.post(f"{console}/crm/up", timeout=5).json() == {"crm": "up"}
        for job_id in crm:
            answer = browser.post_form(
                f"/jobs/{job_id}/retry", f"/jobs/{job_id}", reason="CRM is back up"
            )
            assert answer.status_code == 303, answer.text[:500]

        def recovered() -> dict[int, dict[str, Any]] | None:
            now = _crm_jobs(url)
            retries = [job for job in now.values() if job["retried_from_id"] in crm]
            done = len(retries) == USERS and all(
                job["status"] == JobStatus.SUCCEEDED for job in retries
            )
            return now if done else None

        wait_for("the retried CRM webhooks to succeed", recovered, timeout=30)
        final = _state(console)
        assert final["crm"]["applied"] == USERS
        assert all(d["outcome"] == "applied" for d in final["crm"]["deliveries"])
        # The dead originals stay dead, with their resolution recorded.
        assert all(_crm_jobs(url)[job_id]["status"] == JobStatus.DEAD for job_id in crm)
        assert "Every sign-up reached the CRM" in "\n".join(
            wait_for(
                "the recovery line",
                lambda: [line for line in demo.lines if "reached the CRM" in line],
                timeout=10,
            )
        )
    except BaseException:
        print(demo.output)
        demo.kill()
        raise
    finally:
        if browser is not None:
            browser.close()

    children = descendants(demo.proc.pid)
    code = demo.stop(signal.SIGINT)
    assert code == 0, demo.output
    assert "Demo stopped" in demo.output
    assert '"GET /' not in demo.output  # the dashboard's access log stays in its file
    assert '"GET /' in (tmp_path / "jobdesk-demo" / "dashboard.log").read_text()
    wait_for(
        "every child process to exit",
        lambda: not [pid for pid in children if alive(pid)],
        timeout=10,
    )
    assert port_is_free(port)


def test_demo_story_on_sqlite_then_triage_over_http(tmp_path: Path) -> None:
    _play_and_triage(tmp_path, None)


def test_demo_story_on_postgresql(tmp_path: Path, demo_pg_url: str) -> None:
    _play_and_triage(tmp_path, demo_pg_url)


def test_demo_refuses_a_busy_port_with_a_clear_message(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        demo = DemoProcess(tmp_path, "--port", str(port), "--users", "1")
        code = demo.proc.wait(60)
        demo.stop()
    assert code == 1
    assert f"127.0.0.1:{port}" in demo.output
    assert "--port" in demo.output
    assert not [pid for pid in descendants(demo.proc.pid) if alive(pid)]
