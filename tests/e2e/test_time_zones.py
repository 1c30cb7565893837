"""Times in the browser: a browser in New York reads New York times (UTC when hovering),
its very first page included; an operator whose setting is Asia/Tokyo reads Tokyo
times whatever zone the browser is in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from tests.e2e.conftest import Seeded
from tests.e2e.test_operator_stories import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

Server = tuple[str, Seeded]


@pytest.fixture
def new_york(browser: Any) -> Iterator[Any]:
    context = browser.new_context(
        viewport={"width": 1360, "height": 900}, locale="en-GB", timezone_id="America/New_York"
    )
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    yield page
    context.close()
    assert not errors, errors


def _finished_at(engine: sa.Engine, job_id: int) -> datetime:
    with engine.connect() as conn:
        moment = conn.execute(sa.select(jobs.c.finished_at).where(jobs.c.id == job_id)).scalar()
    assert isinstance(moment, datetime)
    return moment


def _finished(page: Any) -> Any:
    return page.locator("dt", has_text="Finished").locator("xpath=following-sibling::dd[1]/time")


def _wall_clock(moment: datetime, zone: str) -> str:
    local = moment.astimezone(ZoneInfo(zone))
    return f"{local:%H:%M:%S} {local:%Z}"


def test_a_browser_in_new_york_reads_new_york_times_with_utc_on_hover(
    new_york: Any, live_server: Server, engine: sa.Engine
) -> None:
    base, seeded = live_server
    finished = _finished_at(engine, seeded.report_dead)
    log_in(new_york, base, "sam")
    new_york.goto(f"{base}/jobs/{seeded.report_dead}")
    time = _finished(new_york)
    assert _wall_clock(finished, "America/New_York") in time.inner_text()
    assert re.search(r"\d\d:\d\d:\d\d E[SD]T", time.inner_text())
    assert time.get_attribute("title") == f"{finished:%Y-%m-%d %H:%M:%S} UTC"
    assert time.get_attribute("datetime") == f"{finished:%Y-%m-%dT%H:%M:%SZ}"

    # A browser's first page comes before its zone cookie: it is shown once more in
    # the browser's zone, and only once.
    new_york.context.clear_cookies(name="jobdesk_tz")
    loads: list[str] = []
    new_york.on(
        "request",
        lambda request: loads.append(request.url) if request.resource_type == "document" else None,
    )
    new_york.goto(f"{base}/jobs/{seeded.report_dead}")
    zone = 'meta[name=jobdesk-zone][content="America/New_York"][data-source=browser]'
    new_york.locator(zone).wait_for(state="attached")
    assert _wall_clock(finished, "America/New_York") in _finished(new_york).inner_text()
    new_york.wait_for_timeout(500)
    assert loads == [f"{base}/jobs/{seeded.report_dead}"] * 2  # one reload, no more
    new_york.goto(f"{base}/jobs/{seeded.report_dead}")
    new_york.wait_for_timeout(500)
    assert len(loads) == 3


def test_an_operators_tokyo_setting_wins_over_the_browsers_new_york(
    new_york: Any, live_server: Server, engine: sa.Engine
) -> None:
    base, seeded = live_server
    finished = _finished_at(engine, seeded.report_dead)
    log_in(new_york, base, "vic")
    new_york.get_by_role("link", name="Settings").click()
    new_york.wait_for_url(f"{base}/settings")
    assert new_york.locator("#zone-in-use").inner_text() == "America/New_York"
    field = new_york.get_by_label("Show times in")
    field.fill("Asia/Tokio")
    new_york.get_by_role("button", name="Save").click()
    error = new_york.locator("#timezone-error")
    assert "'Asia/Tokio' is not a time zone this server knows" in error.inner_text()
    assert field.get_attribute("aria-invalid") == "true"
    field.fill("Asia/Tokyo")
    new_york.get_by_role("button", name="Save").click()
    new_york.locator(".flash-success", has_text="Times are now shown in Asia/Tokyo.").wait_for()
    assert new_york.locator("#zone-in-use").inner_text() == "Asia/Tokyo"

    new_york.goto(f"{base}/jobs/{seeded.report_dead}")
    time = _finished(new_york)
    assert _wall_clock(finished, "Asia/Tokyo") in time.inner_text()
    assert "JST" in time.inner_text()
    assert time.get_attribute("title") == f"{finished:%Y-%m-%d %H:%M:%S} UTC"
    # The overview, and the refreshes that replace its panels, read Tokyo time too.
    new_york.goto(f"{base}/")
    counts = new_york.locator("p", has_text="Counts as of")
    assert re.search(r"Counts as of \d\d:\d\d:\d\d JST", counts.inner_text())
    with new_york.expect_response(
        lambda response: response.request.headers.get("hx-request") == "true", timeout=15_000
    ):
        pass  # the 5 s refresh swaps the panels
    new_york.wait_for_timeout(300)
    assert re.search(r"Counts as of \d\d:\d\d:\d\d JST", counts.inner_text())
    assert not re.search(r"\bE[SD]T\b", new_york.locator("main").inner_text())
