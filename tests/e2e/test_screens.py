"""The screens' axe check finds what it is there to find: a page with an image without
alternative text, an unlabelled field and grey-on-white text fails it on a light screen,
and the dark screens' colour-only run still finds the contrast."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.screens import open_screen, serious_violations

pytestmark = pytest.mark.e2e

FLAWED = """<!doctype html><html lang="en"><head><title>Flawed</title></head><body>
<main><h1>Flawed</h1>
<p style="color:#c8c8c8;background:#fff">Grey on white, far below 4.5:1</p>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<form><input type="text" name="q"></form>
</main></body></html>"""


@pytest.fixture
def flawed(browser: Any) -> Any:
    with open_screen(browser, "1366", "light") as page:
        page.set_content(FLAWED)
        yield page


def test_every_rule_run_names_each_serious_flaw(flawed: Any) -> None:
    found = " ".join(serious_violations(flawed))
    for rule in ("color-contrast", "image-alt", "label"):
        assert f": {rule} — " in found, found


def test_the_colour_only_run_still_finds_the_contrast(flawed: Any) -> None:
    found = serious_violations(flawed, colours_only=True)
    assert [line.split(" — ")[0] for line in found] == ["serious: color-contrast"]
