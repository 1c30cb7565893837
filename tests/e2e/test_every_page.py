"""Every page, on a phone and a laptop, in light and dark: nothing scrolls sideways — not
the page, and no element around an action or an error text —, no word is broken across
lines, the navigation stays reachable, and axe-core finds no serious accessibility
violation. The checks run again with every <details> opened (tracebacks, the numbers
behind the charts, the password forms).

Every table has rows: on top of the signup story, the CRM webhook has its deliveries and
an open breaker, the reports queue is paused, the nightly report has run once, the
failed report is ignored with its run shown, the bounced email is fixed and retried (a
payload diff in the audit log), one account is disabled, a batch runs with a dead
child and its parts enqueued `after=` an extract (its graph drawn), one tenant is
quarantined while an earlier quarantine of another was released, and two redrives
exist: one stopped by its rule (its new jobs failed again), one paused.

The pages are the ones the navigation offers an admin (so a new page is covered the day
it gets a nav link) plus the detail pages a person lands on from them. The screenshots
are `docs/screenshots/pages/<page>-<width>-<scheme>.png` when
`JOBDESK_E2E_SCREENSHOT_DIR=docs/screenshots` is set. The holds page's preview and its
form refused with every field's error are toured too.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.queues import pause_queue
from jobdesk.shared.flow.holds import HoldTarget, place_hold, release_hold
from jobdesk.shared.limits.breakers import record_failure
from jobdesk.shared.operator.commands.accounts import add_operator, set_disabled
from jobdesk.shared.operator.commands.triage import fix_and_retry, ignore_dead
from jobdesk.shared.reports.models import report_runs
from jobdesk.shared.schedules.store import run_now
from jobdesk.shared.webhooks.models import webhook_deliveries
from tests.e2e.conftest import CRM_ATTEMPTS, CRM_ERROR, PASSWORD, Seeded, screenshots_wanted
from tests.e2e.screens import (
    SCREENS,
    VIEWPORTS,
    broken_words,
    is_phone,
    log_in,
    open_screen,
    out_of_reach,
    screen_problems,
)
from tests.e2e.test_batches_pages import SeededBatch, seed_batch
from tests.e2e.test_redrive_stories import seed_redrives

pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]

Server = tuple[str, Seeded]


@pytest.fixture(params=SCREENS, ids="-".join)
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[tuple[Any, str]]:
    width, scheme = request.param
    with open_screen(browser, width, scheme) as page:
        yield page, f"{width}-{scheme}"


def fill_every_table(engine: sa.Engine, seeded: Seeded) -> SeededBatch:
    """Rows for the tables the signup story leaves empty (see the module docstring)."""
    now = datetime.now(UTC)
    crm_job = seeded.crm_dead[0]
    with engine.begin() as conn:
        for attempt in range(1, CRM_ATTEMPTS + 1):
            at = now - timedelta(hours=3, minutes=10 * (CRM_ATTEMPTS - attempt))
            answered = attempt == CRM_ATTEMPTS - 1
            conn.execute(
                sa.insert(webhook_deliveries).values(
                    job_id=crm_job, attempt=attempt, endpoint="crm",
                    webhook_id="msg_user_201_created",
                    url="https://crm.example.com/hooks/users", at=at,
                    status_code=503 if answered else None,
                    latency_ms=412.0 if answered else 10_000.0,
                    outcome="retry" if answered else "connect_error",
                    response_excerpt='{"error": "maintenance", "retry_after": 600}'
                    if answered else None,
                    error=None if answered else CRM_ERROR,
                )
            )  # fmt: skip
        for _ in range(5):
            record_failure(conn, "webhook:crm", now, CRM_ERROR)
            record_failure(
                conn, "smtp:default", now, "SMTPServerDisconnected: Connection unexpectedly closed"
            )
        conn.execute(
            sa.insert(report_runs).values(
                job_id=seeded.report_dead, report="activity", params={"day": "2026-11-28"},
                status="failed", chunks_total=8, chunks_done=3, rows=1_250,
                error="PermanentError: report 'activity' has no data source for 2026-11-28",
                created_at=now - timedelta(minutes=25), finished_at=now - timedelta(minutes=20),
            )
        )  # fmt: skip
        retired = "The activity source was retired on 2026-11-27; nothing to report"
        ignore_dead(conn, seeded.report_dead, actor="sam", reason=retired, now=now)
        fix_and_retry(
            conn, seeded.email_dead,
            {"to": "ana.lopez@example.com", "template": "welcome", "event_id": "signup:77"},
            actor="sam", reason="Typo in the address, confirmed with the customer", now=now,
        )  # fmt: skip
        pause_queue(conn, "reports", actor="sam", now=now,
                    reason="Report database under maintenance until 10:00")  # fmt: skip
        run_now(conn, "report.nightly", actor="ada", now=now, reason="Rerun after the fix")
        add_operator(conn, "lee", PASSWORD, "viewer", now=now)
        set_disabled(conn, "lee", True, now=now, actor="ada")
    return seed_batch(engine)


#: The reason of the quarantine on the holds page: as long as on-call writes them.
HOLD_REASON = "Runaway CSV import from tenant 42 floods the imports queue; ticket OPS-4711"


def fill_holds(engine: sa.Engine) -> tuple[int, int]:
    """An active quarantine with jobs held (and until when), a released one; returns one
    held job and one keyed job that is not held (its page shows the key's slots)."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        held = enqueue_many(
            conn,
            [
                NewJob("tenant.import", {"row": n}, queue="imports", concurrency_key=key)
                for key in ("tenant:42", "tenant:7")
                for n in range(3)
            ],
        )
        old = place_hold(
            conn, HoldTarget.parse("payload", "account_id=7"), reason="Duplicate billing run",
            actor="ada", now=now - timedelta(hours=3),
        )  # fmt: skip
        release_hold(conn, old.id, actor="sam", now=now - timedelta(hours=1), reason="Cleaned up")
        place_hold(
            conn, HoldTarget.parse("concurrency_key", "tenant:42"), reason=HOLD_REASON,
            actor="sam", now=now, until=now + timedelta(hours=4),
        )  # fmt: skip
    return held[0], held[3]


def nav_pages(page: Any) -> dict[str, str]:
    links = page.eval_on_selector_all(
        "nav[aria-label=Main] a", "els => els.map(a => [a.textContent.trim(), a.href])"
    )
    return {name.lower().replace(" ", "-"): href for name, href in links}


def check(page: Any, name: str, mode: str, folder: Path) -> list[str]:
    problems = screen_problems(page, name)
    if screenshots_wanted():
        page.screenshot(path=str(folder / f"{name}-{mode}.png"), full_page=True)
    # What a click on a summary shows must be in reach too.
    if page.evaluate(
        "() => { const all = document.querySelectorAll('details:not([open])');"
        " all.forEach((d) => { d.open = true; }); return all.length; }"
    ):
        opened = out_of_reach(page, phone=is_phone(page)) + broken_words(page)
        problems += [f"{name} (details opened): {line}" for line in opened]
    return problems


def test_every_page_fits_a_phone_and_passes_axe(
    screen: tuple[Any, str], live_server: Server, screenshot_dir: Path, engine: sa.Engine
) -> None:
    page, mode = screen
    base, seeded = live_server
    batch = fill_every_table(engine, seeded)
    quarantined, keyed = fill_holds(engine)
    redrives = seed_redrives(engine)
    folder = screenshot_dir / "pages"
    folder.mkdir(exist_ok=True)
    page.goto(f"{base}/login")
    problems = check(page, "login", mode, folder)
    log_in(page, base, "ada")
    pages = nav_pages(page)
    menu = {"overview", "jobs", "batches", "dead-letters", "redrives", "queues", "holds"}
    assert menu | {"workers"} <= set(pages)
    pages["job-dead"] = f"{base}/jobs/{seeded.crm_dead[0]}"
    pages["job-report"] = f"{base}/jobs/{seeded.report_dead}"
    pages["jobs-dead"] = f"{base}/jobs?status=dead"
    pages["settings"] = f"{base}/settings"
    pages["batch"] = f"{base}/batches/{batch.id}"
    pages["job-waiting"] = f"{base}/jobs/{batch.on_success}"
    pages["job-quarantined"] = f"{base}/jobs/{quarantined}"
    pages["job-keyed"] = f"{base}/jobs/{keyed}"
    pages["jobs-quarantined"] = f"{base}/jobs?held_by=2"
    pages["hold-preview"] = (
        f"{base}/holds/preview?match=concurrency_key&value=tenant%3A7&reason=Runaway+import&hours=4"
    )
    pages["hold-refused"] = f"{base}/holds/preview?match=payload&value=a%3D1+b%3D2&hours=0"
    pages["redrive"] = f"{base}/redrives/{redrives.stopped}"
    pages["redrive-slowly"] = f"{base}/redrives/new?type=export.part&next=/dead"
    for name, url in pages.items():
        page.goto(url)
        problems += check(page, name, mode, folder)
    assert not problems, "\n".join(problems)


def test_the_phone_menu_opens_and_reaches_every_page(browser: Any, live_server: Server) -> None:
    context = browser.new_context(viewport=VIEWPORTS["390"], locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(10_000)
    base, _ = live_server
    try:
        log_in(page, base, "sam")
        menu = page.get_by_role("button", name="Menu")
        assert menu.is_visible()
        assert menu.get_attribute("aria-expanded") == "false"
        nav = page.locator("#main-nav")
        assert not nav.is_visible()
        menu.click()
        assert menu.get_attribute("aria-expanded") == "true"
        nav.get_by_role("link", name="Dead letters").click()
        page.wait_for_url(f"{base}/dead")
        current = page.locator("nav[aria-label=Main] a[aria-current=page]")
        assert current.all_text_contents() == ["Dead letters"]
    finally:
        context.close()


def test_a_keyboard_user_skips_to_the_content(browser: Any, live_server: Server) -> None:
    context = browser.new_context(viewport=VIEWPORTS["1366"], locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(10_000)
    base, seeded = live_server
    try:
        log_in(page, base, "sam")
        page.goto(f"{base}/jobs/{seeded.crm_dead[0]}")
        page.keyboard.press("Tab")
        skip = page.get_by_role("link", name="Skip to content")
        assert skip.is_visible()  # shown while focused
        page.keyboard.press("Enter")
        assert page.evaluate("location.hash") == "#main"
        # The next Tab stops inside the page, not in the navigation again.
        page.keyboard.press("Tab")
        assert page.evaluate("!!document.activeElement.closest('main')")
    finally:
        context.close()
