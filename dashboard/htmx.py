"""One template serves both the full page and the htmx fragment.

A page template `area/page.html` extends the layout and includes its partial
`area/_name.html`; `render(page, fragment, target)` returns only the partial when htmx
asks for that element (`HX-Request` with `HX-Target: <target>` and not a boosted
navigation), otherwise the full page. Links and forms therefore work without JS.
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def wants_fragment(target: str) -> bool:
    return (
        is_htmx()
        and request.headers.get("HX-Boosted") != "true"
        and request.headers.get("HX-Target") == target
    )


def render(
    page: str, fragment: str | None = None, target: str | None = None, /, **context: Any
) -> str:
    if fragment is not None and target is not None and wants_fragment(target):
        return render_template(fragment, **context)
    return render_template(page, **context)
