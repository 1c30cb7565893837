"""Live lists in a real browser: a list left open announces new jobs instead of moving
rows, shown rows change status in place, the refresh choice follows the operator from
page to page, a bulk retry is followed to its end, and an empty selection is answered
next to the buttons.

The e2e server runs no worker: the tests move job rows themselves to stand in for one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from tests.e2e.test_operator_stories import Server, log_in, shoot
from tests.factories import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

#: Longer than one 5 s poll.
POLL_WAIT_MS = 15_000


def test_support_leaves_the_jobs_list_open_and_sees_2_new_since_loaded(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs?type=email.send&status=queued")
    rows = page.locator("#job-results tbody tr")
    before = rows.count()
    assert before > 0
    first_id = int(rows.first.get_attribute("id").removeprefix("job-"))
    with engine.begin() as conn:
        new = [
            make_job(conn, job_type="email.send", queue="default", payload={"to": "x@example.com"})
            for _ in range(2)
        ]
        make_job(conn, job_type="report.generate", queue="reports")  # not in this list
        conn.execute(sa.update(jobs).where(jobs.c.id == first_id).values(status="running"))
    bar = page.locator(".newsbar")
    bar.wait_for(timeout=POLL_WAIT_MS)
    assert "2 new jobs since you loaded" in bar.inner_text()
    # Nothing moved under the cursor; the shown row's status changed in place.
    assert rows.count() == before
    assert page.locator(f"#job-{first_id}-status").inner_text() == "running"
    shoot(page, screenshot_dir, "jobs-new-since-loaded", backend)
    bar.get_by_role("link", name="show").click()
    page.locator(f"#job-{new[-1]}").wait_for()
    assert page.locator(".newsbar").count() == 0
    assert page.url.endswith("/jobs?status=queued&type=email.send")


def test_the_refresh_choice_follows_the_operator_from_page_to_page(
    page: Any, live_server: Server
) -> None:
    base, _ = live_server
    log_in(page, base, "sam")
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.wait_for_url(f"{base}/jobs")
    page.locator(".refresh").get_by_role("link", name="15 s").click()
    page.wait_for_url(f"{base}/jobs?refresh=15")
    pages = [("Queues", "/queues"), ("Workers", "/workers"), ("Dead letters", "/dead"),
             ("Alerts", "/alerts"), ("Overview", "/")]  # fmt: skip
    for name, path in pages:
        page.get_by_role("link", name=name, exact=True).click()
        page.wait_for_url(f"{base}{path}")
        assert page.locator(".refresh a.active").inner_text() == "15 s", name
    page.locator(".refresh").get_by_role("link", name="off").click()
    page.wait_for_url(f"{base}/?refresh=off")
    page.get_by_role("link", name="Queues", exact=True).click()
    page.wait_for_url(f"{base}/queues")
    assert page.locator(".refresh a.active").inner_text() == "off"
    assert page.locator("[data-poll]").count() == 0


def test_on_call_retries_a_group_and_follows_the_new_jobs_to_succeeded(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    group = len(seeded.crm_dead)
    log_in(page, base, "sam")
    page.get_by_role("link", name="Dead letters", exact=True).click()
    page.locator("article.group").first.get_by_role("link", name=re.compile("Retry all")).click()
    page.get_by_role("button", name=f"Retry {group} jobs").click()
    flash = page.locator(".flash-success")
    flash.wait_for()
    assert f"Requeued {group} jobs." in flash.inner_text()
    flash.locator(".progress-counts", has_text=f"{group} queued").wait_for()
    with engine.connect() as conn:
        new_ids = sorted(
            conn.execute(
                sa.select(jobs.c.id).where(jobs.c.retried_from_id.in_(seeded.crm_dead))
            ).scalars()
        )
    assert len(new_ids) == group
    flash.get_by_role("link", name=f"Follow the {group} new jobs").click()
    page.wait_for_url(re.compile(r".*/jobs\?from_audit=\d+$"))
    rows = page.locator("#job-results tbody tr")
    rows.first.wait_for()
    assert sorted(int(r.get_attribute("id").removeprefix("job-")) for r in rows.all()) == new_ids
    progress = page.locator("#action-progress")
    progress.get_by_text(f"{group} queued").wait_for()
    # A worker picks them up: two finish, the rest run.
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(new_ids[:2])).values(status="succeeded"))
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(new_ids[2:])).values(status="running"))
    progress.get_by_text(f"{group - 2} running").wait_for(timeout=POLL_WAIT_MS)
    assert "2 succeeded" in progress.inner_text()
    page.locator(f"#job-{new_ids[0]}-status", has_text="succeeded").wait_for(timeout=POLL_WAIT_MS)
    shoot(page, screenshot_dir, "bulk-retry-progress", backend)
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(new_ids)).values(status="succeeded"))
    progress.get_by_text("(all finished)").wait_for(timeout=POLL_WAIT_MS)
    assert f"{group} succeeded" in progress.inner_text()


def test_support_ticks_nothing_and_presses_retry_selected(
    page: Any, live_server: Server, backend: str
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs?status=dead&resolution=unresolved")
    url = page.url
    page.get_by_role("button", name="Retry selected…").click()
    message = page.get_by_role("alert").filter(has_text="Nothing selected")
    message.wait_for()
    assert "tick the jobs to act on, then press Retry selected again" in message.inner_text()
    assert page.url == url
    page.get_by_label(f"Select job {seeded.crm_dead[0]}").check()
    assert message.count() == 0
    page.get_by_role("button", name="Retry selected…").click()
    page.get_by_role("heading", name="Retry 1 dead job?").wait_for()


def test_a_refresh_never_throws_away_a_pause_reason_being_typed(
    page: Any, live_server: Server
) -> None:
    base, _ = live_server
    log_in(page, base, "sam")
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/queues" in r.url else None)
    page.goto(f"{base}/queues")
    reason = page.get_by_label("Reason for pausing webhooks")
    reason.fill("CRM maintenance window")
    polls.clear()
    page.wait_for_timeout(6_500)  # longer than one 5 s poll
    assert polls == []
    assert reason.input_value() == "CRM maintenance window"
    # Once the field is left empty and unfocused again, the table refreshes as before.
    reason.fill("")
    page.locator("h1").click()
    with page.expect_response(lambda r: r.url == f"{base}/queues", timeout=POLL_WAIT_MS):
        pass
