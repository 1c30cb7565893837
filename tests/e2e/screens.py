"""The four screens every page must work on — a 390 px phone and a 1366 px laptop, each
in light and dark — and the checks run on them: axe-core (vendored, no download) with no
serious or critical finding, nothing scrolling sideways (neither the page nor, for an
action or an error, any element inside it), and no word broken across two lines.

Shared by the page tour (test_every_page.py) and the demo story (test_demo_story.py).
"""

from __future__ import annotations

import json
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


#: axe's rules whose outcome can change with the colour scheme. Only the stylesheet
#: reads `prefers-color-scheme` (no script or template does), so a page's markup and
#: layout are the same in light and dark at one width: every other rule gives the same
#: answer in both, and the dark screens run these alone (axe is 60 % of a tour's time).
#: Only violations are asked for and sent back (`resultTypes`): axe then stops collecting
#: every passing and inapplicable element, which took more than half of each run
#: (a laptop tour's axe time 11.4 s → 4.7 s); what a violation reports is unchanged.
COLOUR_RULES = ("color-contrast", "link-in-text-block")
_EVERY_RULE = (
    "{resultTypes: ['violations'], runOnly: {type: 'tag', values: "
    "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}}"
)
_COLOUR_ONLY = (
    "{resultTypes: ['violations'], runOnly: {type: 'rule', values: "
    + json.dumps(COLOUR_RULES)
    + "}}"
)


def is_dark(page: Any) -> bool:
    return bool(page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches"))


def serious_violations(page: Any, *, colours_only: bool = False) -> list[str]:
    """Run axe-core on the page as it is now (WCAG 2.1 A/AA rules and best practices,
    or with `colours_only` just `COLOUR_RULES`)."""
    page.evaluate(AXE)
    options = _COLOUR_ONLY if colours_only else _EVERY_RULE
    violations = page.evaluate(f"() => axe.run(document, {options}).then((r) => r.violations)")
    found = []
    for violation in violations:
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


#: What a person must be able to reach: every control, and every element holding an
#: error's text (a list's error column, an attempt's error, a delivery's error, the
#: job's last error, a form field's error, an alert).
ACTIONS = "a[href], button, input:not([type=hidden]), select, textarea, summary"
ERRORS = (
    ".error-cell, .attempt-error, .attempt-error .headline, details.trace > summary, "
    "pre.error, pre.inline-error, .field-error, .flash-error, [role=alert]"
)

#: `describe(el)`: a short name for an element in a failure message.
_DESCRIBE = r"""
  const describe = (el) => {
    const classes = typeof el.className === 'string' && el.className.trim()
      ? '.' + el.className.trim().split(/\s+/).join('.') : '';
    const text = (el.innerText || el.value || el.getAttribute('aria-label') || '')
      .trim().replace(/\s+/g, ' ').slice(0, 40);
    return `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${classes} "${text}"`;
  };
"""


def out_of_reach(page: Any, *, phone: bool) -> list[str]:
    """Controls and error texts a person cannot reach without scrolling sideways: each
    visible one must lie within the viewport's width, and no ancestor that scrolls
    sideways (overflow-x not `visible`, scrollWidth > clientWidth) may cut it off. An
    error text must not cut off its own text either (`text-overflow: ellipsis`); on a
    laptop an error that is the summary of a closed <details> may, its whole text is
    one click away."""
    return list(
        page.evaluate(
            """([actions, errors, phone]) => {"""
            + _DESCRIBE
            + """
              const limit = document.documentElement.clientWidth;
              const found = [];
              for (const el of document.querySelectorAll(actions + ', ' + errors)) {
                const shown = {checkVisibilityCSS: true, visibilityProperty: true};
                if (!el.checkVisibility(shown)) continue;
                const box = el.getBoundingClientRect();
                if (box.width === 0 && box.height === 0) continue;
                if (box.left < -1 || box.right > limit + 1) {
                  found.push(`${describe(el)} lies outside the screen: ` +
                    `${Math.round(box.left)}..${Math.round(box.right)} of 0..${limit} px`);
                  continue;
                }
                for (let up = el.parentElement; up && up !== document.body;
                     up = up.parentElement) {
                  if (getComputedStyle(up).overflowX === 'visible' ||
                      up.scrollWidth <= up.clientWidth + 1) continue;
                  const left = up.getBoundingClientRect().left + up.clientLeft;
                  if (box.left < left - 1 || box.right > left + up.clientWidth + 1) {
                    found.push(`${describe(el)} is cut off by ${describe(up)}, ` +
                      `which scrolls sideways`);
                    break;
                  }
                }
                if (el.matches(errors) && (phone || el.tagName !== 'SUMMARY') &&
                    getComputedStyle(el).overflowX !== 'visible' &&
                    el.scrollWidth > el.clientWidth + 1) {
                  found.push(`${describe(el)} cuts its error text off`);
                }
              }
              return found;
            }""",
            [ACTIONS, ERRORS, phone],
        )
    )


#: A run of characters without a space longer than this (a URL or a hash in an error
#: text) may be broken where a narrow column needs it; a word in a shorter run never.
LONGEST_UNBROKEN = 28


def broken_words(page: Any) -> list[str]:
    """Words (runs of letters and digits: "reports", "201", the parts of `email.send`)
    that the browser broke across two lines, anywhere on the page — except inside a run
    without spaces longer than `LONGEST_UNBROKEN` characters; and identifiers (`.ident`:
    queue names, job types, keys — never broken inside a word, however long) whose CSS
    would allow it: they may break only between their parts."""
    return list(
        page.evaluate(
            """(longest) => {"""
            + _DESCRIBE
            + r"""
              const found = [];
              const range = document.createRange();
              const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
              for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const parent = node.parentElement;
                if (!parent || parent.closest('script, style, option, textarea, svg') ||
                    !parent.checkVisibility({contentVisibilityAuto: true})) continue;
                const text = node.data;
                const ident = parent.closest('.ident');
                for (const word of text.matchAll(/[\p{L}\p{N}]{2,}/gu)) {
                  let start = word.index;
                  let end = start + word[0].length;
                  while (start > 0 && !/\s/.test(text[start - 1])) start--;
                  while (end < text.length && !/\s/.test(text[end])) end++;
                  if (!ident && end - start > longest) continue;
                  range.setStart(node, word.index);
                  range.setEnd(node, word.index + word[0].length);
                  const tops = [...range.getClientRects()].filter((r) => r.width > 0)
                    .map((r) => r.top);
                  if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 2) {
                    found.push(`"${word[0]}" is broken across lines in ${describe(parent)}`);
                  }
                }
              }
              for (const el of document.querySelectorAll('.ident')) {
                const style = getComputedStyle(el);
                if (['break-all', 'break-word'].includes(style.wordBreak) ||
                    style.overflowWrap === 'anywhere') {
                  found.push(`${describe(el)} may break inside a word ` +
                    `(word-break: ${style.wordBreak}, overflow-wrap: ${style.overflowWrap})`);
                }
              }
              return found;
            }""",
            LONGEST_UNBROKEN,
        )
    )


def is_phone(page: Any) -> bool:
    return bool(page.viewport_size["width"] <= VIEWPORTS["390"]["width"])


def screen_problems(page: Any, name: str) -> list[str]:
    """Sideways scroll (of the page, or of an element around an action or an error),
    words broken across lines and serious axe findings on the page as it is now, named
    `name` (in dark, the colour rules only: see `COLOUR_RULES`)."""
    problems = [f"{name}: {line}" for line in sideways_overflow(page)]
    problems += [f"{name}: {line}" for line in out_of_reach(page, phone=is_phone(page))]
    problems += [f"{name}: {line}" for line in broken_words(page)]
    found = serious_violations(page, colours_only=is_dark(page))
    problems += [f"{name}: {line}" for line in found]
    return problems
