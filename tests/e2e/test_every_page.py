"""Every page, on a phone and a laptop, in light and dark: nothing scrolls sideways, the
navigation stays reachable, and axe-core finds no serious accessibility violation.

The pages are the ones the navigation offers an admin (so a new page is covered the day
it gets a nav link) plus the detail pages a person lands on from them. The screenshots
are `docs/screenshots/pages/<page>-<width>-<scheme>.png` when
`JOBDESK_E2E_SCREENSHOT_DIR=docs/screenshots` is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Seeded, screenshots_wanted
from tests.e2e.screens import SCREENS, VIEWPORTS, log_in, open_screen, screen_problems

pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]

Server = tuple[str, Seeded]


@pytest.fixture(params=SCREENS, ids="-".join)
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[tuple[Any, str]]:
    width, scheme = request.param
    with open_screen(browser, width, scheme) as page:
        yield page, f"{width}-{scheme}"


def nav_pages(page: Any) -> dict[str, str]:
    links = page.eval_on_selector_all(
        "nav[aria-label=Main] a", "els => els.map(a => [a.textContent.trim(), a.href])"
    )
    return {name.lower().replace(" ", "-"): href for name, href in links}


def check(page: Any, name: str, mode: str, folder: Path) -> list[str]:
    problems = screen_problems(page, name)
    if screenshots_wanted():
        page.screenshot(path=str(folder / f"{name}-{mode}.png"), full_page=True)
    return problems


def test_every_page_fits_a_phone_and_passes_axe(
    screen: tuple[Any, str], live_server: Server, screenshot_dir: Path
) -> None:
    page, mode = screen
    base, seeded = live_server
    folder = screenshot_dir / "pages"
    folder.mkdir(exist_ok=True)
    page.goto(f"{base}/login")
    problems = check(page, "login", mode, folder)
    log_in(page, base, "ada")
    pages = nav_pages(page)
    assert {"overview", "jobs", "dead-letters", "queues", "workers"} <= set(pages)
    pages["job-dead"] = f"{base}/jobs/{seeded.crm_dead[0]}"
    pages["job-report"] = f"{base}/jobs/{seeded.report_dead}"
    pages["jobs-dead"] = f"{base}/jobs?status=dead"
    pages["settings"] = f"{base}/settings"
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
