"""How often the live pages refresh: one choice per browser — every 5, 15 or 60 seconds,
or off — made with `?refresh=` on any live page and remembered in a cookie, so the
overview, the lists, queues and workers all poll at the pace the operator picked.

The cookie is written only when a person chooses (a page load or a boosted link), never
by a poll: a poll from an older tab must not undo a newer choice made in another one.
Polling itself (htmx `every Ns`, paused while the tab is hidden) is in the templates and
static/dashboard.js.
"""

from __future__ import annotations

from flask import Response, after_this_request, request

from jobdesk.dashboard.htmx import is_htmx
from jobdesk.dashboard.state import get_state
from jobdesk.shared.core.errors import ValidationError

REFRESH_INTERVALS: tuple[str, ...] = ("5", "15", "60", "off")
DEFAULT_REFRESH = "5"
COOKIE_NAME = "jobdesk_refresh"
#: A year: the choice is a display preference, not a credential.
COOKIE_MAX_AGE = 365 * 24 * 3600


def remembered_refresh() -> str:
    """The remembered choice (the default when there is none or it is not allowed)."""
    value = request.cookies.get(COOKIE_NAME)
    return value if value in REFRESH_INTERVALS else DEFAULT_REFRESH


def chosen_refresh() -> str:
    """This page's interval: `?refresh=` (validated, then remembered) or the cookie."""
    raw = request.args.get("refresh")
    if raw is None:
        return remembered_refresh()
    if raw not in REFRESH_INTERVALS:
        raise ValidationError("refresh", f"must be one of {', '.join(REFRESH_INTERVALS)}")
    person_chose = not is_htmx() or request.headers.get("HX-Boosted") == "true"
    if person_chose and request.cookies.get(COOKIE_NAME) != raw:

        @after_this_request
        def _remember(response: Response) -> Response:
            response.set_cookie(
                COOKIE_NAME,
                raw,
                max_age=COOKIE_MAX_AGE,
                path=request.script_root or "/",
                secure=get_state().secure_cookies or request.is_secure,
                httponly=True,
                samesite="Lax",
            )
            return response

    return raw


def poll_seconds(refresh: str) -> int | None:
    """The interval in seconds, None when refreshing is off."""
    return None if refresh == "off" else int(refresh)
