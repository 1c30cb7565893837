"""Why a job waits, on the pages (R26): the job page lists every hold, the jobs list
gives the first one under the status, the overview counts held jobs (with links to
exactly those jobs) instead of calling the queues drained."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.queues import pause_queue
from jobdesk.shared.webhooks.endpoints import add_endpoint, pause_endpoint
from tests.dashboard.conftest import Browser
from tests.factories import make_job


def now() -> datetime:
    return datetime.now(UTC)


def crm_paused(conn: sa.Connection, *, reason: str = "CRM maintenance") -> None:
    at = now() - timedelta(minutes=1)
    add_endpoint(conn, "crm", "http://127.0.0.1:9/hooks", allow_private=True, now=at)
    pause_endpoint(
        conn, "crm", actor="ada", reason=reason, until=now() + timedelta(hours=2), now=at
    )


def delivery(conn: sa.Connection, **fields: object) -> int:
    values: dict[str, object] = {
        "job_type": "webhook.deliver",
        "queue": "webhooks",
        "payload": {"endpoint": "crm", "event": "user.created", "data": {}},
        "started_at": now() - timedelta(minutes=2),
        "next_run_at": now() + timedelta(seconds=50),
    }
    values.update(fields)
    return make_job(conn, **values)


def test_the_job_page_says_why_the_job_waits(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        crm_paused(conn)
        head = delivery(conn, group_key="user:42", next_run_at=now() - timedelta(seconds=1))
        job = delivery(conn, group_key="user:42")
    html = viewer.get(f"/jobs/{job}").get_data(as_text=True)
    panel = html.split('id="why-waiting"')[1].split("</div>")[0]
    assert "held: endpoint crm paused until" in panel
    assert "— CRM maintenance" in panel
    assert 'href="/endpoints#endpoint-crm"' in panel
    assert f"blocked by job #{head} (group user:42)" in panel
    assert f'href="/jobs/{head}"' in panel
    # a finished job waits for nothing
    with engine.begin() as conn:
        done = delivery(conn, status="succeeded", attempts=1)
    assert 'id="why-waiting"' not in viewer.get(f"/jobs/{done}").get_data(as_text=True)


def test_the_jobs_list_gives_the_first_hold_under_the_status(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        crm_paused(conn)
        held = delivery(conn, group_key="user:1")
        delivery(conn, group_key="user:1")
        report = make_job(conn, queue="reports", next_run_at=now() - timedelta(minutes=3))
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=now())
        free = make_job(conn, queue="email", next_run_at=now() - timedelta(minutes=3))
    html = viewer.get("/jobs?status=queued").get_data(as_text=True)

    def row(job_id: int) -> str:
        return html.split(f'id="job-{job_id}"')[1].split("</tr>")[0]

    assert "held: endpoint crm paused until" in row(held)
    assert "held: queue reports paused by sam — month-end close" in row(report)
    assert 'href="/queues#queue-reports"' in row(report)
    assert "hold-line" not in row(free)


def test_the_overview_counts_held_jobs_instead_of_saying_drained(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        crm_paused(conn)
        for _ in range(8):
            delivery(conn)
        for _ in range(4):
            make_job(conn, queue="reports", next_run_at=now() + timedelta(minutes=30))
        make_job(conn, queue="email", status="failed", attempts=1, next_run_at=now() + timedelta(1))
        pause_queue(conn, "reports", actor="sam", reason="month-end close", now=now())
    html = viewer.get("/").get_data(as_text=True)
    line = html.split('id="held-jobs"')[1].split("</div>")[0]
    assert "12 jobs held:" in line
    assert "8 by paused endpoint crm" in line
    assert "4 by paused queue reports" in line
    assert 'href="/jobs?webhook=crm&amp;held=endpoint"' in line
    assert 'href="/jobs?queue=reports&amp;held=queue"' in line
    assert "every queue is drained" not in html
    assert "No job is due: 12 held (see above); 1 wait for a retry or their scheduled time" in html
    listed = viewer.get("/jobs?webhook=crm&held=endpoint").get_data(as_text=True)
    assert listed.count('<tr id="job-') == 8


def test_the_overview_still_says_drained_when_nothing_waits(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        make_job(conn, status="succeeded", attempts=1)
    html = viewer.get("/").get_data(as_text=True)
    assert "No job is waiting: every queue is drained." in html
    assert 'id="held-jobs"' not in html


def test_a_bad_held_filter_is_a_400_naming_it(viewer: Browser) -> None:
    page = viewer.get("/jobs?held=forever")
    assert page.status_code == 400
    assert "Bad filter: held" in page.get_data(as_text=True)
