"""Counted, one-line results of actions ("Requeued 12 jobs."), shown once on the next
page. A note may carry one link (e.g. to the new job a retry created)."""

from __future__ import annotations

from typing import cast

from flask import flash

CATEGORIES = ("success", "info", "error")


def note(
    text: str, category: str = "success", *, href: str | None = None, link: str | None = None
) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown flash category {category!r}")
    # Flask stores any JSON-able value in the session; its type hints only say str.
    flash(cast(str, {"text": text, "href": href, "link": link}), category)
