"""On-call's controls and what they hold, in a real browser: a paused queue, a paused
endpoint and a quarantine of one tenant show on the overview, on the held jobs' pages and
in the jobs list, and lifting the hold clears them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import jobs
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.e2e.conftest import Seeded
from tests.e2e.test_operator_stories import log_in, shoot
from tests.factories import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

Server = tuple[str, Seeded]


def queued_email(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.min(jobs.c.id)).where(
                    jobs.c.job_type == "email.send", jobs.c.status == "queued"
                )
            ).scalar_one()
        )


def test_on_call_pauses_a_queue_sees_it_held_everywhere_and_resumes_it(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    job_id = queued_email(engine)
    log_in(page, base, "sam")
    page.get_by_role("link", name="Queues").click()
    row = page.locator("#queue-email")
    row.get_by_label("Reason for pausing email").fill("SMTP provider incident")
    row.get_by_role("button", name="Pause").click()
    page.locator(".flash-success").wait_for()
    row = page.locator("#queue-email")
    assert "paused" in row.inner_text()
    assert "SMTP provider incident" in row.inner_text()
    shoot(page, screenshot_dir, "queues", backend)

    page.get_by_role("link", name="Overview").click()
    page.wait_for_url(f"{base}/")
    held = page.locator("#held-jobs")
    assert re.search(r"8 jobs held:\s+8 by paused queue email", held.inner_text())
    assert "1 queue paused" in page.get_by_role("status").first.inner_text()
    held.get_by_role("link", name="8 by paused queue email").click()
    page.wait_for_url(re.compile(r".*/jobs\?queue=email&held=queue$"))
    # the overview's polling target is not inherited: the list replaces the page
    assert page.locator("h1").all_inner_texts() == ["Jobs"]
    line = page.locator(f"#job-{job_id} .hold-line")
    assert line.inner_text() == "held: queue email paused by sam — SMTP provider incident"

    page.goto(f"{base}/jobs/{job_id}")
    why = page.locator("#why-waiting")
    assert "held: queue email paused by sam — SMTP provider incident" in why.inner_text()
    why.get_by_role("link").click()
    page.wait_for_url(re.compile(r".*/queues#queue-email$"))
    page.locator("#queue-email").get_by_label("Reason for resuming email").fill("provider is back")
    page.locator("#queue-email").get_by_role("button", name="Resume").click()
    page.locator(".flash-success").wait_for()
    assert "paused" not in page.locator("#queue-email").inner_text()

    page.goto(f"{base}/jobs/{job_id}")
    assert page.locator("#why-waiting").count() == 0
    page.goto(f"{base}/")
    assert page.locator("#held-jobs").count() == 0
    with engine.connect() as conn:
        actions = list(
            conn.execute(
                sa.select(audit_log.c.action).where(audit_log.c.subject == "queue:email")
            ).scalars()
        )
    assert actions == ["queue.pause", "queue.resume"]


def test_a_delivery_to_a_paused_endpoint_says_it_is_held_and_until_when(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    now = datetime.now(UTC)
    with engine.begin() as conn:
        job_id = make_job(
            conn,
            job_type="webhook.deliver",
            queue="webhooks",
            payload={"endpoint": "crm", "event": "user.created", "data": {"user_id": 301}},
            started_at=now - timedelta(minutes=1),
            next_run_at=now + timedelta(seconds=50),
        )
    log_in(page, base, "ada")
    page.get_by_role("link", name="Endpoints", exact=True).click()
    row = page.locator("#endpoint-crm")
    row.get_by_label("Reason for pausing crm").fill("CRM maintenance")
    row.get_by_label("Pause for").select_option("4h")
    row.get_by_role("button", name="Pause").click()
    page.locator(".flash-success").wait_for()

    page.get_by_role("link", name="Overview").click()
    page.wait_for_url(f"{base}/")
    held = page.locator("#held-jobs")
    assert "1 job held:" in held.inner_text()
    held.get_by_role("link", name="1 by paused endpoint crm").click()
    page.wait_for_url(re.compile(r".*/jobs\?webhook=crm&held=endpoint$"))
    assert page.locator("h1").all_inner_texts() == ["Jobs"]
    line = page.locator(f"#job-{job_id} .hold-line").inner_text()
    # The end carries its date when it falls on another day (a pause begun after 20:00 UTC).
    until = r"(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC"
    assert re.fullmatch(rf"held: endpoint crm paused until {until} — CRM maintenance", line)
    shoot(page, screenshot_dir, "jobs-held", backend)

    page.locator(f"#job-{job_id}").get_by_role("link", name=f"#{job_id}").click()
    why = page.locator("#why-waiting")
    assert "held: endpoint crm paused until" in why.inner_text()
    shoot(page, screenshot_dir, "job-held", backend)
    why.get_by_role("link").click()
    page.wait_for_url(re.compile(r".*/endpoints#endpoint-crm$"))
    page.locator("#endpoint-crm").get_by_role("button", name="Resume").click()
    page.locator(".flash-success", has_text="Resumed endpoint crm").wait_for()
    page.goto(f"{base}/jobs/{job_id}")
    # resuming released the held delivery: it is due now and waits for a worker only
    assert page.locator("#why-waiting").count() == 0


_imports = Registry()


@job("tenant.import", queue="imports", concurrency=4, target=_imports)
def import_rows(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


#: The runaway tenant's backlog, and a well-behaved neighbour in the same queue.
FLOOD = 40
NEIGHBOUR = 3


def statuses(engine: sa.Engine, key: str) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(jobs.c.status, sa.func.count())
            .where(jobs.c.concurrency_key == key)
            .group_by(jobs.c.status)
        ).all()
    return {str(row[0]): int(row[1]) for row in rows}


def test_on_call_quarantines_a_flooding_tenant_and_releases_it(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    with engine.begin() as conn:
        flood = enqueue_many(
            conn,
            [
                NewJob("tenant.import", {"row": n}, concurrency_key="tenant:42")
                for n in range(FLOOD)
            ],
        )
        enqueue_many(
            conn,
            [
                NewJob("tenant.import", {"row": n}, concurrency_key="tenant:7")
                for n in range(NEIGHBOUR)
            ],
        )
    log_in(page, base, "sam")
    # tenant:42 floods the imports queue: its jobs are all anyone sees
    page.goto(f"{base}/jobs?queue=imports")
    assert page.locator("#job-results tbody tr").count() == FLOOD + NEIGHBOUR
    page.locator(f"#job-{flood[-1]}").get_by_role("link", name=f"#{flood[-1]}").click()
    assert "tenant:42" in page.locator("#concurrency").inner_text()

    page.get_by_role("link", name="Holds", exact=True).click()
    page.wait_for_url(f"{base}/holds")
    assert "No hold is active" in page.locator("#active-holds").inner_text()
    form = page.locator("#place")
    form.get_by_label("Match by").select_option("concurrency_key")
    form.get_by_label("Value").fill("tenant:42")
    form.get_by_label("Reason (required)").fill("runaway import, ticket 4711")
    form.get_by_role("button", name="Preview…").click()
    page.wait_for_url(re.compile(r".*/holds/preview\?.*value=tenant%3A42.*"))
    assert page.locator("#hold-count").inner_text() == (
        f"This holds {FLOOD} jobs now (and every new matching job until released)."
    )
    assert page.locator("#hold-sample a").first.inner_text() == f"#{flood[0]}"
    shoot(page, screenshot_dir, "hold-preview", backend)
    page.get_by_role("button", name="Confirm the hold").click()
    flash = page.locator(".flash-success")
    flash.wait_for()
    assert f"Placed hold #1 on tenant:42: {FLOOD} jobs held now" in flash.inner_text()
    row = page.locator("#hold-1")
    assert "runaway import, ticket 4711" in row.inner_text()
    assert "by sam" in row.inner_text()
    shoot(page, screenshot_dir, "holds", backend)

    # the neighbour's jobs keep running; tenant:42's wait without using attempts
    drain(engine, registry=_imports, queues=["imports"])
    assert statuses(engine, "tenant:7") == {"succeeded": NEIGHBOUR}
    assert statuses(engine, "tenant:42") == {"waiting": FLOOD}

    row.get_by_role("link", name=str(FLOOD)).click()
    page.wait_for_url(re.compile(r".*/jobs\?held_by=1$"))
    assert page.locator("#job-results tbody tr").count() == FLOOD
    held = flood[5]
    line = page.locator(f"#job-{held} .hold-line").inner_text()
    assert line == "held: quarantine of tenant:42 by sam — runaway import, ticket 4711"
    page.locator(f"#job-{held}").get_by_role("link", name=f"#{held}").click()
    why = page.locator("#why-waiting")
    assert "held: quarantine of tenant:42 by sam — runaway import, ticket 4711" in why.inner_text()
    shoot(page, screenshot_dir, "job-quarantined", backend)

    page.get_by_role("link", name="Overview").click()
    page.wait_for_url(f"{base}/")
    overview = page.locator("#held-jobs")
    assert f"{FLOOD} by quarantine of tenant:42" in overview.inner_text()
    overview.get_by_role("link", name="Quarantine holds →").click()
    page.wait_for_url(f"{base}/holds")

    release = page.locator("#hold-1")
    release.get_by_label("Reason for releasing hold #1").fill("import fixed")
    release.get_by_role("button", name="Release").click()
    page.locator(
        ".flash-success", has_text=f"Released hold #1: {FLOOD} jobs back in line."
    ).wait_for()
    assert "No hold is active" in page.locator("#active-holds").inner_text()
    assert "by sam" in page.locator("#released-holds").inner_text()

    # back in line: the next worker pass runs every one of them
    drain(engine, registry=_imports, queues=["imports"])
    assert statuses(engine, "tenant:42") == {"succeeded": FLOOD}
    page.goto(f"{base}/jobs/{held}")
    assert page.locator("#why-waiting").count() == 0
    assert page.locator(f"#job-{held}-status .badge").first.inner_text() == "succeeded"
    page.goto(f"{base}/audit")
    audit = page.locator("main").inner_text()
    assert "hold.add" in audit
    assert "hold.release" in audit
