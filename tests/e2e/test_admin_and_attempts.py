"""Two more stories in the browser: an admin manages the operator accounts, and support
reads a job's attempts — one line each, the traceback only when asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts
from tests.e2e.conftest import CRM_ERROR, Seeded
from tests.e2e.test_operator_stories import log_in, shoot
from tests.factories import make_job

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

Server = tuple[str, Seeded]
SITE = "/srv/app/.venv/lib/python3.12/site-packages"
OWN_FRAMES = "".join(
    f'  File "{SITE}/jobdesk/worker/{name}.py", line {40 + 7 * n}, in {name}\n'
    f"    return self._{name}(job)\n"
    for n, name in enumerate(
        ("runner", "pool", "executor", "executor", "context", "resilience", "executor")
    )
)
APP_FRAME = (
    '  File "/srv/app/integrations/crm.py", line 41, in deliver_user\n'
    "    response = client.post(endpoint.url, json=body, timeout=10.0)\n"
    "               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
)


def test_admin_adds_an_operator_resets_a_password_and_disables_the_account(
    page: Any, browser: Any, live_server: Server, screenshot_dir: Path, backend: str,
    engine: sa.Engine,
) -> None:  # fmt: skip
    base, _ = live_server
    log_in(page, base, "ada")
    page.get_by_role("link", name="Operators").click()
    page.wait_for_url(f"{base}/operators")
    page.get_by_label("Username").fill("nina")
    page.get_by_label("Role", exact=True).select_option("operator")
    page.get_by_label("Initial password").fill("blue kettle on the stove")
    page.get_by_role("button", name="Add account").click()
    page.locator(".flash-success", has_text="Added nina as operator").wait_for()
    row = page.locator("#operator-nina")
    assert "operator" in row.inner_text()
    assert "never" in row.inner_text()

    # Nina logs in in her own browser.
    other = browser.new_context(viewport={"width": 1360, "height": 900})
    nina = other.new_page()
    nina.goto(f"{base}/login")
    nina.get_by_label("Username").fill("nina")
    nina.get_by_label("Password").fill("blue kettle on the stove")
    nina.get_by_role("button", name="Log in").click()
    nina.wait_for_url(f"{base}/")
    assert nina.get_by_role("link", name="Operators").count() == 0  # admins only

    row.get_by_text("Reset password…").click()
    row.get_by_label("New password for nina").fill("red lantern by the door")
    row.get_by_role("button", name="Set password").click()
    page.locator(".flash-success", has_text="Password of nina reset").wait_for()
    nina.goto(f"{base}/jobs")
    assert "/login" in nina.url  # her session ended with the reset

    page.locator("#operator-nina").get_by_role("button", name="Disable").click()
    page.locator(".flash-success", has_text="Disabled nina").wait_for()
    assert "disabled" in page.locator("#operator-nina").inner_text()
    shoot(page, screenshot_dir, "operators", backend)
    nina.get_by_label("Username").fill("nina")
    nina.get_by_label("Password").fill("red lantern by the door")
    nina.get_by_role("button", name="Log in").click()
    assert nina.get_by_text("Wrong username or password.").is_visible()
    other.close()

    # The last admin cannot take herself out.
    page.locator("#operator-ada").get_by_label("Role of ada").select_option("viewer")
    page.locator("#operator-ada").get_by_role("button", name="Change role").click()
    page.locator(".flash-error", has_text="ada is the only enabled admin").wait_for()
    with engine.connect() as conn:
        actions = list(
            conn.execute(
                sa.select(audit_log.c.action)
                .where(audit_log.c.subject == "operator:nina", audit_log.c.actor == "ada")
                .order_by(audit_log.c.id)
            ).scalars()
        )
    assert actions == ["operator.add", "operator.password", "operator.disable"]


def _job_with_five_attempts(engine: sa.Engine) -> int:
    """A webhook retried after 2, 4, 8 and 16 s, timing out the same way every time."""
    now = datetime.now(UTC)
    start = now - timedelta(minutes=40)
    with engine.begin() as conn:
        job_id = make_job(
            conn, job_type="webhook.deliver", queue="webhooks", status="dead", attempts=5,
            max_attempts=5, payload={"endpoint": "crm", "event": "user.created",
                                     "data": {"user_id": 301}},
            last_error=f"{CRM_ERROR}\n{OWN_FRAMES}{APP_FRAME}",
            error_fingerprint=fingerprint(CRM_ERROR), finished_at=now - timedelta(minutes=39),
            created_at=start,
        )  # fmt: skip
        for number, wait in enumerate((0, 2, 4, 8, 16), start=1):
            start += timedelta(seconds=wait)
            error = f"{CRM_ERROR}\n{OWN_FRAMES}{APP_FRAME}"
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id, attempt=number, worker_id="app-1:4242:9f1c",
                    outcome="timeout", started_at=start,
                    finished_at=start + timedelta(seconds=10), error=error,
                    error_fingerprint=fingerprint(error),
                )
            )  # fmt: skip
            start += timedelta(seconds=10)
    return job_id


def test_support_reads_five_attempts_on_one_screen(
    page: Any, live_server: Server, screenshot_dir: Path, backend: str, engine: sa.Engine
) -> None:
    base, _ = live_server
    job_id = _job_with_five_attempts(engine)
    log_in(page, base, "sam")
    page.goto(f"{base}/jobs/{job_id}")
    rows = page.locator("#attempts tbody tr")
    assert rows.count() == 5
    assert [rows.nth(i).locator("td").nth(2).inner_text() for i in range(5)] == [
        "—", "+2 s", "+4 s", "+8 s", "+16 s",
    ]  # fmt: skip
    assert rows.nth(0).locator("time").get_attribute("datetime").endswith("Z")
    for i in range(1, 5):
        assert rows.nth(i).get_by_text("same error as attempt 1").is_visible()
    table = page.locator("#attempts table")
    row_heights = [rows.nth(i).bounding_box()["height"] for i in range(5)]
    assert max(row_heights) < 48, row_heights  # one line each
    assert table.bounding_box()["height"] < 6 * 48  # the header and five short rows
    closed = page.evaluate("document.body.scrollHeight")
    attempts = page.locator("#attempts")
    assert attempts.get_by_text("ConnectTimeout").first.is_visible()
    assert not attempts.get_by_text("integrations/crm.py").first.is_visible()
    shoot(page, screenshot_dir, "job-attempts", backend)

    # The first line opens the traceback: the application's frame, Jobdesk's folded.
    rows.nth(0).locator("summary").first.click()
    assert rows.nth(0).get_by_text("integrations/crm.py").is_visible()
    fold = rows.nth(0).get_by_text("… 7 Jobdesk frames")
    assert fold.is_visible()
    assert not rows.nth(0).get_by_text("executor.py").first.is_visible()
    opened = page.evaluate("document.body.scrollHeight")
    assert opened > closed
    assert table.bounding_box()["height"] < 600
    fold.click()
    assert rows.nth(0).get_by_text("executor.py").first.is_visible()
    print(f"attempts page: {closed} px closed, {opened} px with one traceback open")
