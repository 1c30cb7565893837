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

from tests.e2e.conftest import PASSWORD, Seeded

pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]

Server = tuple[str, Seeded]
AXE = (Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js").read_text()
VIEWPORTS = {"390": {"width": 390, "height": 844}, "1366": {"width": 1366, "height": 900}}
SCHEMES = ("light", "dark")
#: axe's impact levels that fail the test; "minor"/"moderate" findings are printed.
BLOCKING = {"serious", "critical"}


@pytest.fixture(params=[(w, s) for w in VIEWPORTS for s in SCHEMES], ids="-".join)
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[tuple[Any, str]]:
    width, scheme = request.param
    context = browser.new_context(
        viewport=VIEWPORTS[width], color_scheme=scheme, locale="en-GB", timezone_id="UTC"
    )
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on(
        "console",
        lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    yield page, f"{width}-{scheme}"
    context.close()
    assert not problems, problems


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")


def serious_violations(page: Any) -> list[str]:
    """Run axe-core on the page as it is now (WCAG 2.1 A/AA rules and best practices)."""
    page.evaluate(AXE)
    result = page.evaluate(
        "() => axe.run(document, {runOnly: {type: 'tag', values: "
        "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}})"
    )
    found = []
    for violation in result["violations"]:
        targets = [" ".join(node["target"]) for node in violation["nodes"]][:5]
        line = f"{violation['impact']}: {violation['id']} — {violation['help']} at {targets}"
        if violation["impact"] in BLOCKING:
            found.append(line)
        else:
            print(line)
    return found


def sideways_overflow(page: Any) -> list[str]:
    """The page's width beyond the viewport, and the widest elements that cause it."""
    return list(
        page.evaluate(
            """() => {
              const limit = document.documentElement.clientWidth;
              if (document.documentElement.scrollWidth <= limit) return [];
              const wide = [];
              for (const el of document.body.querySelectorAll('*')) {
                const box = el.getBoundingClientRect();
                if (box.right > limit + 1 && getComputedStyle(el).position !== 'fixed') {
                  wide.push(`${el.tagName.toLowerCase()}.${el.className} right=${box.right}`);
                }
              }
              return [`scrollWidth ${document.documentElement.scrollWidth} > ${limit}`,
                      ...wide.slice(0, 8)];
            }"""
        )
    )


def nav_pages(page: Any) -> dict[str, str]:
    links = page.eval_on_selector_all(
        "nav[aria-label=Main] a", "els => els.map(a => [a.textContent.trim(), a.href])"
    )
    return {name.lower().replace(" ", "-"): href for name, href in links}


def check(page: Any, name: str, mode: str, folder: Path) -> list[str]:
    problems = [f"{name}: {line}" for line in sideways_overflow(page)]
    problems += [f"{name}: {line}" for line in serious_violations(page)]
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
