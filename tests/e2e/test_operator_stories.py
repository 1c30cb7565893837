"""Operator stories in a real browser (Chromium via Playwright) against a real server.

Each test is one thing a support person or on-call engineer does; the screenshots they
take are the README's pictures.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.transitions import stop_cancelled
from tests.e2e.conftest import PASSWORD, Seeded, screenshots_wanted

pytestmark = pytest.mark.e2e

Server = tuple[str, Seeded]


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")


def shoot(page: Any, folder: Path, name: str, backend: str) -> None:
    if backend == "sqlite" and screenshots_wanted():
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_operator_logs_in_and_sees_the_overview(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str
) -> None:
    base, _ = live_server
    page.goto(f"{base}/jobs?status=dead")
    assert "/login?next=" in page.url
    page.get_by_label("Username").fill("sam")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_text("Wrong username or password.").is_visible()
    shoot(page, screenshot_dir, "login", backend)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r".*/jobs\?status=dead$"))
    page.get_by_role("link", name="Overview").click()
    page.wait_for_url(f"{base}/")
    assert page.evaluate("typeof window.htmx") == "object"
    assert page.get_by_text("Dead, needs a decision").is_visible()
    assert page.get_by_text("Jobs by queue and type").is_visible()
    # The panels poll: the next refresh swaps them in place without a page load.
    with page.expect_response(lambda r: r.url.startswith(f"{base}/?refresh=")):
        pass
    shoot(page, screenshot_dir, "overview", backend)


def test_support_finds_the_dead_crm_webhooks_by_searching_the_error(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_label("Status").select_option("dead")
    page.get_by_label("Error contains").fill("crm.example.com")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r".*error=crm\.example\.com.*"))
    rows = page.locator("#job-results tbody tr")
    rows.first.wait_for()
    assert rows.count() == len(seeded.crm_dead)
    assert "status=dead" in page.url
    shoot(page, screenshot_dir, "jobs-search", backend)
    # The URL is the bookmark: reloading it shows the same list.
    page.reload()
    assert page.locator("#job-results tbody tr").count() == len(seeded.crm_dead)
    assert page.get_by_label("Error contains").input_value() == "crm.example.com"


def test_support_finds_a_customers_webhook_by_its_payload(
    page: Any, live_server: Server, backend: str
) -> None:
    base, seeded = live_server
    log_in(page, base, "vic")
    page.goto(f"{base}/jobs")
    page.get_by_label("Job type").select_option("webhook.deliver")
    page.wait_for_url(re.compile(r".*type=webhook\.deliver.*"))
    page.get_by_label("Payload has").fill("data.user_id=203 endpoint=crm")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r".*payload=.*"))
    rows = page.locator("#job-results tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1
    assert rows.first.get_attribute("id") == f"job-{seeded.crm_dead[2]}"
    # The address bar holds only what filters: no blank fields, no defaults.
    assert "status=" not in page.url
    assert "sort=" not in page.url
    assert "1 job in all" in page.locator("#job-total").inner_text()
    # The summary column masks the token for everyone and the email for a viewer.
    summary = rows.first.locator(".payload-cell").inner_text()
    assert "endpoint=crm" in summary
    assert "crm_live" not in summary
    # A viewer cannot learn a masked value by searching for it.
    page.get_by_label("Payload has").fill("api_token=crm_live_8f2d1c")
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("cannot search 'api_token'").wait_for()


def test_support_retries_one_and_sees_the_new_job_and_the_audit_entry(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    job_id = seeded.crm_dead[0]
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs/{job_id}")
    assert page.get_by_text("This job is dead:").is_visible()
    assert "crm_live_8f2d1c" not in page.content()
    shoot(page, screenshot_dir, "job-detail-dead", backend)
    page.get_by_placeholder("Why (optional), e.g. CRM is back up").fill("CRM is back up")
    page.get_by_role("button", name="Retry as a new job").click()
    flash = page.locator(".flash-success")
    flash.wait_for()
    found = re.search(rf"Requeued job #{job_id} as new job #(\d+)", flash.inner_text())
    assert found is not None
    new_id = int(found.group(1))
    flash.get_by_role("link").click()
    page.wait_for_url(f"{base}/jobs/{new_id}")
    assert page.get_by_text(f"Retry of job #{job_id}").is_visible()
    page.get_by_role("link", name="Audit log", exact=True).click()
    entry = page.locator("#audit-results tbody tr").first
    assert "retry" in entry.inner_text()
    assert "CRM is back up" in entry.inner_text()
    shoot(page, screenshot_dir, "audit-log", backend)
    with engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.retried_from_id).where(jobs.c.id == new_id)
                            ).scalar_one() == job_id  # fmt: skip


def test_support_fixes_a_payload_and_retries(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs/{seeded.email_dead}")
    page.get_by_role("link", name="Edit payload…").click()
    editor = page.get_by_label("Payload (JSON object)")
    text = editor.input_value()
    assert "exmaple.con" in text
    editor.fill(text.replace('"template": "welcome"', '"template": ""'))
    page.get_by_role("button", name="Save and retry as a new job").click()
    errors = page.locator(".field-errors")
    errors.wait_for()
    assert "payload.template" in errors.inner_text()
    shoot(page, screenshot_dir, "fix-and-retry", backend)
    page.get_by_label("Payload (JSON object)").fill(text.replace("exmaple.con", "example.com"))
    page.get_by_label("What did you change?").fill("typo in the address")
    page.get_by_role("button", name="Save and retry as a new job").click()
    page.locator(".flash-success").wait_for()
    assert "Fixed the payload and requeued" in page.locator(".flash-success").inner_text()
    assert page.locator("table.diff").first.is_visible()
    with engine.connect() as conn:
        fixed = conn.execute(sa.select(jobs.c.payload).where(
            jobs.c.retried_from_id == seeded.email_dead)).scalar_one()  # fmt: skip
    assert fixed["to"] == "ana.lopez@example.com"


def test_support_ignores_a_job_with_a_reason(
    page: Any, live_server: Server, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs/{seeded.report_dead}")
    page.get_by_placeholder("Why (required), e.g. customer deleted").fill(
        "data source retired; report no longer needed"
    )
    page.get_by_role("button", name="Ignore with this reason").click()
    page.locator(".flash-success").wait_for()
    assert page.get_by_text("data source retired; report no longer needed").first.is_visible()
    page.goto(f"{base}/jobs?status=dead&resolution=ignored")
    assert page.locator(f"#job-{seeded.report_dead}").is_visible()
    with engine.connect() as conn:
        assert conn.execute(sa.select(audit_log.c.reason).where(
            audit_log.c.action == "ignore")).scalar_one().startswith("data source")  # fmt: skip


def test_on_call_bulk_requeues_a_fingerprint_group(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.get_by_role("link", name="Dead letters", exact=True).click()
    group = page.locator("article.group").first
    assert "ConnectTimeout" in group.inner_text()
    shoot(page, screenshot_dir, "dead-letters", backend)
    group.get_by_role("link", name=re.compile(r"Retry all")).click()
    page.get_by_text("Check the impact, then confirm").wait_for()
    assert page.get_by_role("heading", name=f"Retry {len(seeded.crm_dead)} dead jobs?").is_visible()
    shoot(page, screenshot_dir, "bulk-preview", backend)
    page.get_by_role("button", name=f"Retry {len(seeded.crm_dead)} jobs").click()
    flash = page.locator(".flash-success")
    flash.wait_for()
    assert f"Requeued {len(seeded.crm_dead)} jobs." in flash.inner_text()
    assert page.url == f"{base}/dead"
    with engine.connect() as conn:
        retried = conn.execute(sa.select(sa.func.count()).where(
            jobs.c.retried_from_id.in_(seeded.crm_dead))).scalar_one()  # fmt: skip
    assert retried == len(seeded.crm_dead)


def test_viewer_cannot_act(page: Any, live_server: Server, backend: str) -> None:
    base, seeded = live_server
    log_in(page, base, "vic")
    page.goto(f"{base}/jobs/{seeded.crm_dead[1]}")
    assert page.get_by_role("button", name="Retry as a new job").count() == 0
    assert "u***@example.com" in page.content()
    status = page.evaluate(
        """async (url) => {
            const token = document.querySelector('meta[name="csrf-token"]').content;
            const response = await fetch(url, {method: "POST", headers: {"X-CSRF-Token": token}});
            return response.status;
        }""",
        f"{base}/jobs/{seeded.crm_dead[1]}/retry",
    )
    assert status == 403
    page.goto(f"{base}/dead/bulk?action=retry&ids={seeded.crm_dead[1]}")
    assert page.get_by_text("Your role (viewer) cannot do this").is_visible()


def test_admin_pauses_an_endpoint(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str
) -> None:
    base, _ = live_server
    log_in(page, base, "ada")
    page.get_by_role("link", name="Endpoints", exact=True).click()
    row = page.locator("#endpoint-crm")
    row.get_by_label("Reason for pausing crm").fill("CRM migration tonight")
    row.get_by_label("Pause for").select_option("4h")
    row.get_by_role("button", name="Pause").click()
    page.locator(".flash-success").wait_for()
    row = page.locator("#endpoint-crm")
    assert "paused" in row.inner_text()
    assert "CRM migration tonight" in row.inner_text()
    shoot(page, screenshot_dir, "endpoints", backend)
    row.get_by_role("button", name="Resume").click()
    page.locator(".flash-success", has_text="Resumed endpoint crm").wait_for()
    assert "active" in page.locator("#endpoint-crm").inner_text()


def test_on_call_pauses_the_nightly_report_and_runs_it_now(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    log_in(page, base, "sam")
    page.get_by_role("link", name="Schedules").click()
    row = page.locator("#schedule-report\\.nightly")
    assert "every day at 02:00 (Europe/Berlin)" in row.inner_text()
    assert "Europe/Berlin" in row.inner_text()
    row.get_by_label("Reason for pausing report.nightly").fill("month-end freeze")
    row.get_by_role("button", name="Pause").click()
    page.locator(".flash-success", has_text="Paused schedule report.nightly").wait_for()
    row = page.locator("#schedule-report\\.nightly")
    assert "paused" in row.inner_text()
    assert "month-end freeze" in row.inner_text()
    row.get_by_role("button", name="Run now").click()
    page.locator(".flash-success", has_text="Enqueued job #").wait_for()
    assert page.locator("#schedule-report\\.nightly").get_by_text("queued").is_visible()
    shoot(page, screenshot_dir, "schedules", backend)
    page.locator("#schedule-report\\.nightly").get_by_role("button", name="Resume").click()
    page.locator(".flash-success", has_text="Resumed schedule report.nightly").wait_for()
    with engine.connect() as conn:
        actions = list(
            conn.execute(
                sa.select(audit_log.c.action).where(
                    audit_log.c.subject == "schedule:report.nightly"
                )
            ).scalars()
        )
    assert actions == ["schedule.pause", "schedule.run", "schedule.resume"]


def test_on_call_cancels_a_running_report(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    with engine.begin() as conn:
        running = sa.select(jobs.c.id).where(
            jobs.c.status == "running", jobs.c.job_type == "report.generate"
        )
        report_id = conn.execute(running).scalar_one()
        # The worker's claim: the lease the worker's own writes are fenced by.
        conn.execute(sa.update(jobs).where(jobs.c.id == report_id).values(lease_token=41))
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs?status=running")
    page.locator(f"#job-{report_id}").get_by_role("link", name=f"#{report_id}").click()
    page.get_by_label("Reason for cancelling").fill("started for the wrong month")
    page.get_by_role("button", name="Stop and cancel this job").click()
    page.locator(".flash-success", has_text=f"Asked the worker running job #{report_id}").wait_for()
    banner = page.locator(f"#job-{report_id}-cancel")
    assert re.search(r"Cancel requested by sam at \d\d:\d\d UTC", banner.inner_text())
    assert "hard stop by" in banner.inner_text()
    assert page.get_by_role("button", name="Stop and cancel this job").count() == 0
    shoot(page, screenshot_dir, "cancel-requested", backend)
    # Its worker hears of the request with its next heartbeat and stops the handler.
    with engine.begin() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == report_id)).one()
        ref = JobRef(row.id, 41, row.attempts, str(row.locked_by), row.started_at)
        assert stop_cancelled(conn, ref, error="Cancelled: stopped on request", now=db_now(conn))
    page.reload()
    banner = page.locator(f"#job-{report_id}-cancel")
    text = banner.inner_text()
    assert re.search(
        r"Cancelled by sam at \d\d:\d\d UTC \(.*\) — “started for the wrong month”", text
    )
    assert page.locator(".badge.outcome-cancelled").is_visible()
    with engine.connect() as conn:
        asked = sa.select(audit_log.c.reason).where(
            audit_log.c.action == "cancel", audit_log.c.job_id == report_id
        )
        reasons = list(conn.execute(asked).scalars())
    assert reasons == ["started for the wrong month"]
