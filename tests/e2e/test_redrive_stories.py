"""Paced redrive in a real browser: on-call redrives the CRM's error group slowly from the
dead letters, watches its progress refresh, pauses and cancels it, and finds every step
in the audit log; a redrive whose new jobs fail again stops by itself and says why.

The e2e server runs no worker: the tests take the leader's steps themselves
(`redrive_step` at the database's time) and stand in for the worker's outcomes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.redrives.commands import pause_redrive, start_redrive
from jobdesk.shared.redrives.models import redrive_items
from jobdesk.shared.redrives.rules import StopRule
from jobdesk.shared.redrives.stepper import redrive_step
from tests.e2e.conftest import CRM_ERROR, Seeded
from tests.e2e.test_operator_stories import log_in, shoot
from tests.factories import make_job

pytestmark = pytest.mark.e2e

Server = tuple[str, Seeded]

#: Longer than one 5 s poll.
POLL_WAIT_MS = 15_000
BILLING_ERROR = "WebhookDeliveryError: endpoint billing: http_status: 502 Bad Gateway"


def leader_step(engine: sa.Engine, redrive_id: int) -> int:
    """One step of the leader's redriver, at the database's time; how many it requeued."""
    with engine.begin() as conn:
        done = redrive_step(conn, redrive_id, now=db_now(conn))
    assert done is not None
    return done.requeued


def fail_first_attempts(engine: sa.Engine, redrive_id: int, error: str) -> list[int]:
    """The redrive's new jobs fail their first attempt, as a worker would record it."""
    with engine.begin() as conn:
        made = list(
            conn.execute(
                sa.select(redrive_items.c.new_job_id).where(
                    redrive_items.c.redrive_id == redrive_id,
                    redrive_items.c.new_job_id.is_not(None),
                )
            ).scalars()
        )
        for job_id in made:
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id, attempt=1, worker_id="app-1:4242:9f1c", outcome="failed",
                    error=error, error_fingerprint=fingerprint(error),
                )
            )  # fmt: skip
            conn.execute(
                sa.update(jobs)
                .where(jobs.c.id == job_id)
                .values(status="failed", attempts=1, last_error=error)
            )
    return made


def test_on_call_redrives_the_crm_group_slowly_then_pauses_and_cancels_it(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, seeded = live_server
    log_in(page, base, "sam")
    page.get_by_role("link", name="Dead letters", exact=True).click()
    group = page.locator(f"#group-{fingerprint(CRM_ERROR)}")
    assert "ConnectTimeout" in group.inner_text()
    group.get_by_role("link", name="Redrive slowly…").click()
    crm = len(seeded.crm_dead)
    page.get_by_role("heading", name=f"Redrive {crm} dead jobs slowly?").wait_for()
    assert "error group" in page.locator("main").inner_text()
    page.get_by_label("Jobs per minute").fill("30")
    page.get_by_label("Reason (required)").fill("CRM is back after the outage")
    shoot(page, screenshot_dir, "redrive-form", backend)
    page.get_by_role("button", name="Start redrive").click()
    page.wait_for_url(f"{base}/redrives/1")
    flash = page.locator(".flash-success")
    assert f"Started redrive #1: {crm} dead jobs at 30 per minute" in flash.inner_text()
    progress = page.locator("#redrive-1-progress")
    assert progress.inner_text() == f"0 of {crm} requeued, 0 failed again"

    # The leader's first step; the page shows it at its next refresh, without a reload.
    assert leader_step(engine, 1) == 1
    page.locator(
        "#redrive-1-progress",
        has_text=f"1 of {crm} requeued, 0 failed again, 1 waiting for a first outcome",
    ).wait_for(timeout=POLL_WAIT_MS)
    assert page.locator("#redrive-1-state").inner_text() == "running"
    shoot(page, screenshot_dir, "redrive", backend)

    page.get_by_label("Reason for pausing redrive #1").fill("CRM is slow again")
    page.get_by_role("button", name="Pause").click()
    page.locator(".flash-success", has_text="Paused redrive #1").wait_for()
    assert page.locator("#redrive-1-state").inner_text() == "paused"
    assert leader_step(engine, 1) == 0  # paused: nothing more goes

    page.get_by_role("link", name="Redrives", exact=True).click()
    page.wait_for_url(f"{base}/redrives")
    row = page.locator("#redrive-1")
    assert "paused by sam" in row.inner_text()
    assert "CRM is slow again" in row.inner_text()
    row.get_by_label("Reason for cancelling redrive #1").fill("Waiting for the CRM's fix")
    row.get_by_role("button", name="Cancel redrive").click()
    page.locator(".flash-success", has_text="Cancelled redrive #1").wait_for()
    row = page.locator("#redrive-1")
    assert page.locator("#redrive-1-state").inner_text() == "cancelled"
    assert row.get_by_role("button").count() == 0
    shoot(page, screenshot_dir, "redrives", backend)

    page.get_by_role("link", name="Audit log", exact=True).click()
    page.wait_for_url(f"{base}/audit")
    entries = page.locator("table.audit tbody")
    for action in ("redrive.start", "redrive.pause", "redrive.cancel"):
        assert action in entries.inner_text()
    assert "Waiting for the CRM's fix" in entries.inner_text()
    with engine.connect() as conn:
        trail = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor, audit_log.c.reason)
            .where(audit_log.c.subject == "redrive:1")
            .order_by(audit_log.c.id)
        ).all()
        undecided = conn.execute(
            sa.select(sa.func.count()).where(
                jobs.c.id.in_(seeded.crm_dead), jobs.c.resolution.is_(None)
            )
        ).scalar_one()
        requeued = conn.execute(
            sa.select(jobs.c.resolved_by).where(
                jobs.c.id == seeded.crm_dead[0], jobs.c.resolution == "requeued"
            )
        ).scalar_one()
    assert [tuple(row) for row in trail] == [
        ("redrive.start", "sam", "CRM is back after the outage"),
        ("retry", "sam", "CRM is back after the outage"),
        ("redrive.pause", "sam", "CRM is slow again"),
        ("redrive.cancel", "sam", "Waiting for the CRM's fix"),
    ]
    assert requeued == "sam"
    assert undecided == crm - 1  # the rest stay dead, waiting for a decision


@dataclass
class SeededRedrives:
    stopped: int
    paused: int


def seed_redrives(engine: sa.Engine) -> SeededRedrives:
    """Two redrives for the page tour: one the stop rule ended (two billing webhooks
    that failed again) and one paused on the CRM's group."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for user in (301, 302):
            make_job(
                conn, job_type="webhook.deliver", queue="webhooks", status="dead", attempts=5,
                payload={"endpoint": "billing", "event": "invoice.paid", "data": {"user": user}},
                last_error=BILLING_ERROR, error_fingerprint=fingerprint(BILLING_ERROR),
                finished_at=now,
            )  # fmt: skip
        stopped = start_redrive(
            conn, JobFilters(fingerprint=fingerprint(BILLING_ERROR)), rate_per_minute=120,
            stop_rule=StopRule(2, 2), actor="sam", reason="Billing deployed a fix", now=now,
        )  # fmt: skip
        redrive_step(conn, stopped, now=now)  # the first
        redrive_step(conn, stopped, now=now + timedelta(seconds=30))  # the second
    fail_first_attempts(engine, stopped, BILLING_ERROR)
    with engine.begin() as conn:
        redrive_step(conn, stopped, now=now + timedelta(seconds=60))  # both failed: stop
        paused = start_redrive(
            conn, JobFilters(fingerprint=fingerprint(CRM_ERROR)), rate_per_minute=60,
            stop_rule=StopRule(), actor="sam", reason="CRM is back", now=now,
        )  # fmt: skip
        pause_redrive(conn, paused, actor="ada", reason="Wait for the CRM's go-ahead", now=now)
    return SeededRedrives(stopped, paused)


@pytest.mark.one_database
def test_a_redrive_whose_new_jobs_fail_again_stops_by_itself_and_says_why(
    page: Any, live_server: Server, engine: sa.Engine
) -> None:
    base, _ = live_server
    seeded = seed_redrives(engine)
    log_in(page, base, "vic")  # a viewer reads it all, and gets no controls
    page.goto(f"{base}/redrives/{seeded.stopped}")
    summary = page.locator("#redrive-summary")
    assert "Stopped by its rule: 2 of the first 2 new jobs failed again" in summary.inner_text()
    assert page.locator(f"#redrive-{seeded.stopped}-state").inner_text() == "stopped"
    failing = page.locator("table.failed-again tbody tr")
    assert failing.count() == 2
    assert "502 Bad Gateway" in failing.first.inner_text()
    assert page.locator("#redrive-summary[data-poll]").count() == 0  # ended: no polling
    page.goto(f"{base}/redrives")
    assert (
        page.get_by_role("button").filter(has_text=re.compile("Pause|Resume|Cancel")).count() == 0
    )
    row = page.locator(f"#redrive-{seeded.paused}")
    assert "paused by ada" in row.inner_text()
