"""The zone the current viewer reads times in, decided once per request.

In order: the operator's own setting (the Settings page; `Identity.timezone`), else the
zone their browser reports in the `jobdesk_tz` cookie (static/dashboard.js writes it
from `Intl.DateTimeFormat().resolvedOptions().timeZone`), else UTC. The cookie is only
a hint: a name this server's time zone database does not know is ignored, never an
error. Every time is rendered here, on the server, in that zone — so a full page, the
htmx fragment that refreshes part of it and a page loaded without JavaScript agree.

A browser's very first page comes before its cookie exists and is rendered in UTC
(every time says "UTC"); dashboard.js then writes the cookie and reloads that one page
once (see there for why that cannot loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, tzinfo

from flask import g, request

from jobdesk.dashboard import auth
from jobdesk.shared.operator.zones import DEFAULT_ZONE, known_zone

COOKIE_NAME = "jobdesk_tz"


@dataclass(frozen=True, slots=True)
class ViewerZone:
    name: str
    zone: tzinfo
    #: Where it came from: "setting" (the operator's), "browser" (the cookie) or
    #: "default" (neither: UTC).
    source: str


def _decide() -> ViewerZone:
    identity = auth.current()
    chosen = identity.timezone if identity is not None else None
    zone = known_zone(chosen)
    if chosen and zone is not None:
        return ViewerZone(chosen, zone, "setting")
    reported = request.cookies.get(COOKIE_NAME)
    zone = known_zone(reported)
    if reported and zone is not None:
        return ViewerZone(reported, zone, "browser")
    return ViewerZone(DEFAULT_ZONE, UTC, "default")


def viewer_zone() -> ViewerZone:
    """This request's zone (decided on first use, after the guard set the identity)."""
    decided: ViewerZone | None = g.get("jobdesk_viewer_zone")
    if decided is None:
        decided = _decide()
        g.jobdesk_viewer_zone = decided
    return decided


def browser_zone() -> str | None:
    """The zone the browser reported, when this server knows it."""
    reported = request.cookies.get(COOKIE_NAME)
    return reported if known_zone(reported) is not None else None
