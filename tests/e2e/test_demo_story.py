"""The demo's story, walked through the dashboard on every screen: a 390 px phone and a
1366 px laptop, each in light and dark.

The seeded server holds the sign-up story the morning after (tests/e2e/conftest.py,
shaped like `jobdesk demo`): welcome emails went out, the CRM never answered, its
webhooks went dead after five attempts and the outage raised two alerts. Support then
triages it the way docs/demo.md tells them to, and on-call holds the CRM's deliveries:

 1. log in;                                  8. retry one CRM webhook as a new job;
 2. the overview shows the open alert;       9. ignore the report with a reason;
 3. acknowledge the alert;                  10. "Retry all" on the CRM's group: preview,
 4. search the error ("endpoint crm");      11. … and confirm;
 5. open a job: five timed-out attempts;    12. on-call pauses the CRM endpoint;
 6. dead letters, grouped by error;         13. the new deliveries wait, saying why;
 7. fix the bounced email's payload, retry; 14. the audit log says who did what.

Every step checks axe-core (no serious or critical finding), no sideways scroll, and the
action's visible result. With `JOBDESK_E2E_SCREENSHOT_DIR=docs/screenshots` each step
is also `docs/screenshots/story/NN-<step>-<width>-<scheme>.png` (the viewport only, the
step's result scrolled into it), linked from docs/dashboard.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CRM_ATTEMPTS, Seeded
from tests.e2e.screens import SCREENS, log_in, open_screen, screen_problems

pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]

Server = tuple[str, Seeded]


class Story:
    """Numbers the steps, checks each screen and takes its picture."""

    def __init__(self, page: Any, mode: str, folder: Path | None) -> None:
        self.page = page
        self.mode = mode
        self.folder = folder
        self.number = 0
        self.problems: list[str] = []

    def step(self, name: str, shows: Any = None) -> None:
        """The screen after step `name`; `shows` is what the picture must contain."""
        self.number += 1
        label = f"{self.number:02d}-{name}"
        self.problems += screen_problems(self.page, label)
        if self.folder is not None:
            if shows is not None:
                shows.scroll_into_view_if_needed()
            self.page.screenshot(path=str(self.folder / f"{label}-{self.mode}.png"))


@pytest.fixture(params=SCREENS, ids="-".join)
def story(request: pytest.FixtureRequest, browser: Any) -> Iterator[Story]:
    width, scheme = request.param
    configured = os.environ.get("JOBDESK_E2E_SCREENSHOT_DIR")
    folder = Path(configured) / "story" if configured else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    with open_screen(browser, width, scheme) as page:
        yield Story(page, f"{width}-{scheme}", folder)


def go(page: Any, name: str, path: str) -> None:
    """Follow the main navigation's `name` link (through the menu on a phone)."""
    menu = page.get_by_role("button", name="Menu")
    if menu.is_visible():
        menu.click()
    page.locator("#main-nav").get_by_role("link", name=name, exact=True).click()
    page.wait_for_url(re.compile(rf"^[^?#]*{re.escape(path)}([?#].*)?$"))


def log_out(page: Any, base: str) -> None:
    button = page.get_by_role("button", name="Log out")
    if not button.is_visible():
        page.get_by_role("button", name="Menu").click()
    button.click()
    page.wait_for_url(re.compile(rf"^{re.escape(base)}/login"))


def flash(page: Any, text: str) -> Any:
    message = page.locator(".flash-success", has_text=text)
    message.wait_for()
    return message


def dead_group(page: Any, text: str) -> Any:
    return page.locator("article.group", has_text=text)


def test_the_demo_story_on_every_screen(story: Story, live_server: Server) -> None:
    page = story.page
    base, seeded = live_server
    crm_count = len(seeded.crm_dead)

    # 1. Support opens the dashboard and is asked to log in first.
    page.goto(f"{base}/")
    page.wait_for_url(re.compile(r".*/login\?next="))
    assert page.get_by_role("button", name="Log in").is_visible()
    story.step("login")
    log_in(page, base, "sam")

    # 2. The overview: dead jobs need a decision, the dead-letter spike is still open.
    alerts_panel = (
        page.locator("section, div.panel")
        .filter(has=page.get_by_role("heading", name=re.compile(r"^Open alerts")))
        .last
    )
    assert alerts_panel.get_by_text("dead_letter_spike").is_visible()
    assert alerts_panel.get_by_text("webhook.deliver jobs to crm died since").is_visible()
    assert page.get_by_text("Dead, needs a decision").is_visible()
    story.step("overview", alerts_panel)

    # 3. The alert page says where to look; support takes the alert.
    go(page, "Alerts", "/alerts")
    spike = page.locator("tr[id^=alert-]", has_text="dead_letter_spike")
    assert spike.get_by_role("link", name="endpoint crm").is_visible()
    assert "same incident as alert #" in spike.inner_text()
    spike.get_by_label("Acknowledgement note").fill("CRM is down; support is on it")
    spike.get_by_role("button", name="Acknowledge").click()
    acknowledged = flash(page, "Acknowledged alert #")
    taken = page.locator("tr[id^=alert-]", has_text="dead_letter_spike").locator("td").last
    assert "sam" in taken.inner_text()
    assert "CRM is down; support is on it" in taken.inner_text()
    story.step("alert-acknowledged", acknowledged)

    # 4. Search the error, as docs/demo.md tells support to.
    go(page, "Jobs", "/jobs")
    page.get_by_label("Status").select_option("dead")
    page.get_by_label("Job type").select_option("webhook.deliver")
    page.get_by_label("Error contains").fill("endpoint crm")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r".*error=endpoint(\+|%20)crm.*"))
    rows = page.locator("#job-results tbody tr[id^=job-]")
    rows.first.wait_for()
    assert rows.count() == crm_count
    story.step("search-the-error", rows.first)

    # 5. Open one: five attempts, every one timed out the same way.
    opened = rows.first.get_by_role("link", name=re.compile(r"^#\d+$")).first
    opened_id = int(opened.inner_text().lstrip("#"))
    assert opened_id in seeded.crm_dead
    opened.click()
    page.wait_for_url(f"{base}/jobs/{opened_id}")
    assert page.get_by_text("This job is dead:").is_visible()
    attempts = page.locator("#attempts tbody tr")
    assert attempts.count() == CRM_ATTEMPTS
    assert page.locator("#attempts").get_by_text("ConnectTimeout").first.is_visible()
    story.step("five-attempts", page.locator("#attempts"))

    # 6. Dead letters: the CRM failures are one group, beside the other two errors.
    go(page, "Dead letters", "/dead")
    crm_group = dead_group(page, "endpoint crm")
    assert crm_group.locator(".count").inner_text().startswith(str(crm_count))
    assert dead_group(page, "mailbox unavailable").count() == 1
    assert dead_group(page, "no data source").count() == 1
    story.step("dead-letters", crm_group)

    # 7. The bounced welcome email had a typo in its address: fix it and retry.
    dead_group(page, "mailbox unavailable").get_by_role(
        "link", name=f"#{seeded.email_dead}"
    ).click()
    page.wait_for_url(f"{base}/jobs/{seeded.email_dead}")
    page.get_by_role("link", name="Edit payload…").click()
    editor = page.get_by_label("Payload (JSON object)")
    editor.fill(editor.input_value().replace("exmaple.con", "example.com"))
    page.get_by_label("What did you change?").fill("typo in the address")
    page.get_by_role("button", name="Save and retry as a new job").click()
    fixed = flash(page, "Fixed the payload and requeued")
    assert re.search(rf"job #{seeded.email_dead} as new job #\d+", fixed.inner_text())
    diff = page.locator("table.diff").first
    assert "example.com" in diff.inner_text()
    story.step("fix-and-retry", diff)

    # 8. Retry one CRM webhook: a new job; the dead one stays as it was.
    go(page, "Dead letters", "/dead")
    dead_group(page, "endpoint crm").get_by_role("link", name=re.compile(r"^#\d+$")).click()
    page.wait_for_url(re.compile(rf"{re.escape(base)}/jobs/\d+$"))
    retried_id = int(page.url.rsplit("/", 1)[1])
    assert retried_id in seeded.crm_dead
    page.get_by_placeholder("Why (optional), e.g. CRM is back up").fill("CRM is back up")
    page.get_by_role("button", name="Retry as a new job").click()
    requeued = flash(page, f"Requeued job #{retried_id} as new job #")
    found = re.search(r"as new job #(\d+)", requeued.inner_text())
    assert found is not None
    new_id = int(found.group(1))
    assert new_id not in seeded.crm_dead
    requeued.get_by_role("link", name=f"Open job #{new_id}").click()
    page.wait_for_url(f"{base}/jobs/{new_id}")
    lineage = page.get_by_text(f"Retry of job #{retried_id}")
    assert lineage.is_visible()
    story.step("retry-one", lineage)

    # 9. The report asks for a data source that is gone: ignore it, saying why.
    go(page, "Dead letters", "/dead")
    dead_group(page, "no data source").get_by_role("link", name=f"#{seeded.report_dead}").click()
    page.wait_for_url(f"{base}/jobs/{seeded.report_dead}")
    reason = "data source retired; report no longer needed"
    page.get_by_placeholder("Why (required), e.g. customer deleted").fill(reason)
    page.get_by_role("button", name="Ignore with this reason").click()
    ignored = flash(page, f"Ignored job #{seeded.report_dead}")
    assert page.get_by_text(reason).first.is_visible()
    story.step("ignore-with-a-reason", ignored)

    # 10. The rest of the CRM's group at once: first the preview of what it will do…
    go(page, "Dead letters", "/dead")
    rest = crm_count - 1
    crm_group = dead_group(page, "endpoint crm")
    crm_group.get_by_role("link", name=f"Retry all {rest}…").click()
    heading = page.get_by_role("heading", name=f"Retry {rest} dead jobs?")
    heading.wait_for()
    assert page.get_by_text("Check the impact, then confirm").is_visible()
    story.step("bulk-retry-preview", heading)

    # 11. … then the retry: one new job each, and a link to follow exactly those.
    page.get_by_role("button", name=f"Retry {rest} jobs").click()
    bulk = flash(page, f"Requeued {rest} jobs.")
    assert bulk.get_by_role("link", name=f"Follow the {rest} new jobs").is_visible()
    assert dead_group(page, "endpoint crm").count() == 0
    story.step("bulk-retried", bulk)

    # 12. On-call holds the CRM's deliveries while the vendor looks into it.
    log_out(page, base)
    log_in(page, base, "ada")
    go(page, "Endpoints", "/endpoints")
    row = page.locator("#endpoint-crm")
    row.get_by_label("Reason for pausing crm").fill("CRM flapping; vendor investigating")
    row.get_by_label("Pause for").select_option("4h")
    row.get_by_role("button", name="Pause").click()
    flash(page, "Paused endpoint crm")
    row = page.locator("#endpoint-crm")
    assert "paused" in row.inner_text()
    assert "CRM flapping; vendor investigating" in row.inner_text()
    story.step("endpoint-paused", row)

    # 13. Every new delivery waits without spending attempts, and says why.
    go(page, "Overview", "/")
    held = page.locator("#held-jobs")
    held.get_by_role("link", name=f"{crm_count} by paused endpoint crm").click()
    page.wait_for_url(re.compile(r".*held=endpoint.*"))
    lines = page.locator("#job-results .hold-line")
    lines.first.wait_for()
    assert lines.count() == crm_count
    assert all(text.startswith("held: endpoint crm paused") for text in lines.all_inner_texts())
    story.step("deliveries-held", lines.first)

    # 14. The audit log: who did what, and why.
    go(page, "Audit log", "/audit")
    entries = page.locator("#audit-results .table-wrap > table > tbody > tr")
    entries.first.wait_for()
    done = [
        (row.split("\t")[1:3])
        for row in entries.evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()).join('\\t'))"
        )
    ]
    assert done[0] == ["ada", "endpoint.pause"]
    assert ["sam", "alert.acknowledge"] in done
    assert ["sam", "fix_retry"] in done
    assert ["sam", "ignore"] in done
    assert done.count(["sam", "retry"]) == crm_count
    assert page.locator("#audit-results").get_by_text("CRM is back up").first.is_visible()
    story.step("audit-log", entries.first)

    assert not story.problems, "\n".join(story.problems)
