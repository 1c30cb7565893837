"""Response headers every dashboard response carries, and the session cookie policy.

- a strict Content-Security-Policy: scripts and styles only from our own static files
  (no inline script or style, no eval), no framing, forms post only to us;
- nosniff, a same-origin Referrer-Policy, no framing, COOP;
- `Cache-Control: no-store` on every page (pages show payloads and errors), while the
  versioned static files may be cached;
- the session cookie is HttpOnly, SameSite=Lax, and Secure whenever the request came in
  over TLS (or JOBDESK_SECURE_COOKIES is on);
- host checks against DNS rebinding (`host_allowed`, `rebinding_safe`): a page on
  `evil.example` whose name an attacker points at 127.0.0.1 reaches the dashboard with
  `Host: evil.example`, so what a loopback-only endpoint answers must depend on the
  Host being one that cannot be rebound — an IP literal, `localhost`, or a name listed
  in `JOBDESK_ALLOWED_HOSTS`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from flask import Flask, Response, request
from flask.sessions import SecureCookieSessionInterface, SessionMixin

from jobdesk.dashboard.auth import session_expires_at
from jobdesk.dashboard.state import EXTENSION_KEY

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


def apply_headers(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if request.endpoint and request.endpoint.endswith(".static"):
        response.headers["Cache-Control"] = "public, max-age=86400"
    else:
        response.headers["Cache-Control"] = "no-store"
        response.headers["Pragma"] = "no-cache"
        response.vary.add("HX-Request")
        response.vary.add("Cookie")
    return response


class SessionInterface(SecureCookieSessionInterface):
    """Marks the session cookie Secure when the request arrived over TLS, and lets the
    browser keep it no longer than the session's absolute lifetime (Flask would slide
    the expiry forward on every request)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        state = app.extensions.get(EXTENSION_KEY)
        forced = bool(state is not None and state.secure_cookies)
        return forced or bool(app.config.get("SESSION_COOKIE_SECURE")) or request.is_secure

    def get_expiration_time(self, app: Flask, session: SessionMixin) -> datetime | None:
        sliding = super().get_expiration_time(app, session)
        state = app.extensions.get(EXTENSION_KEY)
        if sliding is None or state is None:
            return sliding
        end = session_expires_at(session, state.settings.session_lifetime_seconds)
        if end is None:
            return sliding
        return min(sliding, datetime.fromtimestamp(end, UTC))


def host_name(host: str) -> str:
    """`Jobs.Example.com:8000` → `jobs.example.com`; `[::1]:8000` → `::1`."""
    try:
        name = urlsplit(f"//{host}").hostname
    except ValueError:
        return ""
    return (name or "").rstrip(".").lower()


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Is `host` one of `allowed` (`.example.com` also allows its subdomains)? An empty
    allow-list allows every host."""
    patterns = [entry.strip().lower().strip("[]") for entry in allowed if entry.strip()]
    if not patterns:
        return True
    name = host_name(host)
    for pattern in patterns:
        if pattern.startswith("."):
            if name == pattern[1:] or name.endswith(pattern):
                return True
        elif name == pattern:
            return True
    return False


def rebinding_safe(host: str, allowed: Iterable[str]) -> bool:
    """True when the Host cannot be an attacker's rebound DNS name: an IP literal,
    `localhost`, or a name on the (non-empty) allow-list."""
    name = host_name(host)
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        allowed = [entry for entry in allowed if entry.strip()]
        return bool(allowed) and host_allowed(host, allowed)
    return True
