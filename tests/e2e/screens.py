"""The four screens every page must work on — a 390 px phone and a 1366 px laptop, each
in light and dark — and the checks run on them: axe-core (vendored, no download) with no
serious or critical finding, and nothing scrolling sideways.

Shared by the page tour (test_every_page.py) and the demo story (test_demo_story.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.conftest import PASSWORD

AXE = (Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js").read_text()
VIEWPORTS = {"390": {"width": 390, "height": 844}, "1366": {"width": 1366, "height": 900}}
SCHEMES = ("light", "dark")
#: (width, scheme) of every screen, e.g. ("390", "dark"); the test ids join them.
SCREENS = [(width, scheme) for width in VIEWPORTS for scheme in SCHEMES]
#: axe's impact levels that fail the test; "minor"/"moderate" findings are printed.
BLOCKING = {"serious", "critical"}


@contextmanager
def open_screen(browser: Any, width: str, scheme: str) -> Iterator[Any]:
    """A fresh browser context at `width` in `scheme`; a CSP report or a script error on
    its page fails the test when the context closes."""
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
    # The actions' "are you sure?" (hx-confirm) is answered yes, as the person would.
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        yield page
    finally:
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


def screen_problems(page: Any, name: str) -> list[str]:
    """Sideways scroll and serious axe findings on the page as it is now, named `name`."""
    problems = [f"{name}: {line}" for line in sideways_overflow(page)]
    problems += [f"{name}: {line}" for line in serious_violations(page)]
    return problems
