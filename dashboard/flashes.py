"""Counted, one-line results of actions ("Requeued 12 jobs."), shown once on the next
page. A note may carry one link (e.g. to the new job a retry created) and a `progress`
fragment URL the message polls (the status counts of the jobs a bulk retry made)."""

from __future__ import annotations

from typing import cast

from flask import flash

CATEGORIES = ("success", "info", "error")


def note(
    text: str,
    category: str = "success",
    *,
    href: str | None = None,
    link: str | None = None,
    progress: str | None = None,
) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown flash category {category!r}")
    message = {"text": text, "href": href, "link": link}
    if progress is not None:
        message["progress"] = progress
    # Flask stores any JSON-able value in the session; its type hints only say str.
    flash(cast(str, message), category)
